"""E2's worker in Python: the `sleep` handler of `taskforge worker` (sleeps
payload.ms, then acks). Usage: e2worker.py URL QUEUE CONCURRENCY [PREFETCH]."""

import sys
import time

import taskforge


def main() -> None:
    url, queue, conc = sys.argv[1], sys.argv[2], int(sys.argv[3])
    prefetch = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    w = taskforge.Worker(url, concurrency=conc, prefetch=prefetch, shutdown_grace=5)

    @w.handle(queue)
    def sleep(job: taskforge.Job) -> None:
        time.sleep(job.payload["ms"] / 1000)

    w.run()


if __name__ == "__main__":
    main()
