"""The Python counterpart of `taskforge worker --queue Q=HANDLER` for the
benchmark harness (`taskforge bench --language python`): the ``noop`` handler
returns at once, ``sleep`` sleeps payload.ms. Settings come from the
environment, as the harness sets them: TASKFORGE_URL, QUEUE, HANDLER (noop or
sleep), CONCURRENCY, PREFETCH (default the SDK's), WORKER_ID. Stops gracefully
on SIGTERM or SIGINT. With TASKFORGE_CPROFILE=FILE it writes a cProfile of every
thread over the whole run to FILE."""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import taskforge  # noqa: E402


def main() -> None:
    env = os.environ
    kwargs: dict[str, object] = {"concurrency": int(env.get("CONCURRENCY", "1")), "shutdown_grace": 5.0}
    if "PREFETCH" in env:
        kwargs["prefetch"] = int(env["PREFETCH"])
    if "WORKER_ID" in env:
        kwargs["worker_id"] = env["WORKER_ID"]
    w = taskforge.Worker(env["TASKFORGE_URL"], **kwargs)  # type: ignore[arg-type]

    if env.get("HANDLER", "noop") == "sleep":
        def handler(job: taskforge.Job) -> None:
            time.sleep(job.payload["ms"] / 1000)
    else:
        def handler(job: taskforge.Job) -> None:
            return None
    w.handle(env["QUEUE"])(handler)

    profile = env.get("TASKFORGE_CPROFILE")
    if not profile:
        w.run()
        return
    # Every thread's profile (the poller, the task threads, the acks), merged.
    import cProfile
    import pstats
    import threading

    profiles: list[cProfile.Profile] = []

    def profile_thread(*_: object) -> None:
        sys.setprofile(None)
        p = cProfile.Profile()
        profiles.append(p)
        p.enable()

    threading.setprofile(profile_thread)
    main_profile = cProfile.Profile()
    main_profile.enable()
    try:
        w.run()
    finally:
        main_profile.disable()
        pstats.Stats(main_profile, *profiles).dump_stats(profile)


if __name__ == "__main__":
    main()
