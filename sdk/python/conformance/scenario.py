"""The cross-language conformance scenario in Python (contract:
sdk/conformance/README.md). Run by sdk/conformance's Go test with TASKFORGE_URL
and TASKFORGE_QUEUE set; prints one JSON line of task ids and exits 0."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import taskforge

URL = os.environ["TASKFORGE_URL"]
QUEUE = os.environ["TASKFORGE_QUEUE"]
WAIT_LIMIT = 60.0  # seconds for any one wait of the scenario


START = time.monotonic()


def log(msg: str) -> None:
    print(f"scenario.py +{time.monotonic() - START:.3f}s: {msg}", file=sys.stderr, flush=True)


def main() -> int:
    c = taskforge.Client(URL)
    ids: dict[str, str] = {}
    holding = threading.Event()
    seen_fail = threading.Lock()
    fail_seen = [False]

    def handler(job: taskforge.Job) -> object:
        kind = job.payload["kind"]
        if kind == "ack":
            job.progress({"pct": 50})
            time.sleep(3)  # longer than the server's 2 s lease: heartbeats keep it
            return {"kind": "ack", "ok": True}
        if kind == "nack":
            if job.attempt == 1:
                raise taskforge.RetryableError("transient", retry_after=0.2)
            return {"kind": "nack", "ok": True}
        if kind == "fail":
            with seen_fail:
                first, fail_seen[0] = not fail_seen[0], True
            if first:
                raise taskforge.PermanentError("permanent failure")
            return {"kind": "fail", "ok": True}
        if kind == "grouped":
            return {"kind": "grouped", "ok": True}
        if kind == "hold":
            holding.set()
            job.wait()  # until the runtime asks the handler to stop
            return None
        raise taskforge.PermanentError(f"unknown kind {kind!r}")

    w = taskforge.Worker(c, concurrency=4, shutdown_grace=1.0, poll_wait=2.0, worker_id=f"conformance-py-{os.getpid()}")
    w.handle(QUEUE, handler)
    failure: list[BaseException] = []

    def wait_for(name: str, status: str) -> taskforge.Task:
        t = c.wait_task(QUEUE, ids[name], timeout=WAIT_LIMIT)
        if t.status != status:
            raise RuntimeError(f"task {name} ({t.id}) is {t.status}, want {status}")
        return t

    def flow() -> None:
        try:
            c.put_group(QUEUE, "tenant-a", weight=3, max_concurrency=1)
            ids["ack"] = c.enqueue(QUEUE, {"kind": "ack"}).id
            ids["nack"] = c.enqueue(QUEUE, {"kind": "nack"}, max_retries=3).id
            ids["fail"] = c.enqueue(QUEUE, {"kind": "fail"}, max_retries=3).id
            ids["grouped"] = c.enqueue(QUEUE, {"kind": "grouped"}, group="tenant-a").id
            log("enqueued ack, nack, fail, grouped")
            wait_for("ack", "done")
            wait_for("nack", "done")
            wait_for("fail", "dead")
            wait_for("grouped", "done")
            log("ack, nack and grouped done, fail dead")
            ids["replay"] = c.replay_dead(QUEUE, ids["fail"]).id
            wait_for("replay", "done")
            log("replay done")
            ids["hold"] = c.enqueue(QUEUE, {"kind": "hold"}).id
            if not holding.wait(WAIT_LIMIT):
                raise RuntimeError("the hold task never reached its handler")
            log("hold held; sending SIGTERM")
        except BaseException as e:  # noqa: BLE001 - reported below, after the worker stops
            failure.append(e)
        # Stop the worker the way an operator does: SIGTERM to this process.
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=flow, name="scenario-flow", daemon=True).start()
    w.run()  # handles SIGTERM: stops polling, releases the held task, returns
    log("worker stopped")
    if failure:
        log(f"failed: {failure[0]!r}")
        return 1
    print(json.dumps({k: ids[k] for k in ("ack", "nack", "fail", "replay", "hold", "grouped")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
