"""Ad-hoc E2 comparison: the Python SDK's worker against the Go SDK's
(`taskforge worker`, the reference worker on package client), in the same run, on
the same serve, PostgreSQL and Redis.

E2 as docs/benchmarks.md defines it: 1,000 tasks that sleep 50 ms, enqueued while
the queue is paused, released at once, drained; throughput = tasks / (last
finished_at − first started_at), read from the attempts table; efficiency =
throughput / (workers × 20/s). Each step warms up with 50 tasks first.

    python3 sdk/python/bench/e2.py --taskforge bin/taskforge [--layouts 1x16,16x1] [--runs 3]

Needs the local PostgreSQL (postgres://postgres@127.0.0.1:5432) and Redis, and psql;
it imports the package from sdk/python/src.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import taskforge  # noqa: E402

PG = "postgres://postgres@127.0.0.1:5432"


def psql(db: str, sql: str) -> str:
    return subprocess.run(["psql", "-qAtX", f"{PG}/{db}?sslmode=disable", "-c", sql], check=True,
                          capture_output=True, text=True).stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_seconds(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / float(tick)
        except (OSError, IndexError):
            pass
    return total


def wait_drained(c: taskforge.Client, queue: str, n: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = c.stats(queue)
        if sum(v for k, v in st.depth.items() if k not in ("done",)) == 0 and st.depth.get("done", 0) >= n:
            return
        time.sleep(0.2)
    raise TimeoutError(f"queue {queue} did not drain")


def step(c: taskforge.Client, url: str, db: str, impl: str, procs: int, conc: int, tasks: int, binary: str,
         run: int) -> dict[str, object]:
    queue = f"e2-{impl}-{procs}x{conc}-{run}"
    c.create_queue(queue)
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "src"))
    workers = []
    for i in range(procs):
        if impl == "go":
            argv = [binary, "worker", "--server", url, "--queue", f"{queue}=sleep", "--concurrency", str(conc),
                    "--log-level", "warn"]
        else:
            argv = [sys.executable, os.path.join(HERE, "e2worker.py"), url, queue, str(conc)]
        workers.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        # Every worker polls before the warm-up: an interpreter still starting
        # when the queue resumes would count against its SDK.
        deadline = time.monotonic() + 60
        while sum(queue in w.queues for w in c.list_workers()) < procs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{impl} workers of {queue} did not all start polling")
            time.sleep(0.1)
        c.enqueue_batch(queue, [{"payload": {"ms": 50}} for _ in range(50)])  # warm-up
        wait_drained(c, queue, 50)
        c.pause_queue(queue)
        for i in range(0, tasks, 1000):
            c.enqueue_batch(queue, [{"payload": {"ms": 50, "m": 1}} for _ in range(min(1000, tasks - i))])
        load0 = os.getloadavg()[0]
        cpu0 = cpu_seconds([w.pid for w in workers])
        t0 = time.monotonic()
        c.resume_queue(queue)
        wait_drained(c, queue, 50 + tasks)
        wall = time.monotonic() - t0
        cpu = cpu_seconds([w.pid for w in workers]) - cpu0
        load1 = os.getloadavg()[0]
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(15)
            except subprocess.TimeoutExpired:
                w.kill()
    n, span = psql(db, f"""SELECT count(*), extract(epoch FROM max(a.finished_at) - min(a.started_at))
        FROM attempts a JOIN tasks t ON t.id = a.task_id
        WHERE t.queue = '{queue}' AND t.payload ? 'm' AND a.status = 'succeeded'""").split("|")
    thr = int(n) / float(span)
    return {"impl": impl, "layout": f"{procs}x{conc}", "run": run, "tasks": int(n), "throughput": round(thr, 1),
            "efficiency": round(thr / (procs * conc * 20), 3), "wall_s": round(wall, 2),
            "worker_cpu_ms_per_task": round(cpu * 1000 / tasks, 3), "load1_before": load0, "load1_after": load1}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--taskforge", required=True)
    ap.add_argument("--layouts", default="1x16,16x1")
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    db = "tf_pybench_" + secrets.token_hex(4)
    psql("postgres", f"CREATE DATABASE {db}")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, DATABASE_URL=f"{PG}/{db}?sslmode=disable", REDIS_URL="redis://127.0.0.1:6379",
               TASKFORGE_REDIS_PREFIX=db, TASKFORGE_LISTEN=f"127.0.0.1:{port}", TASKFORGE_LOG_LEVEL="warn")
    serve = subprocess.Popen([args.taskforge, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results: list[dict[str, object]] = []
    try:
        c = taskforge.Client(url)
        for _ in range(100):
            try:
                c.readyz()
                break
            except taskforge.APIError:
                time.sleep(0.1)
        for run in range(args.runs):
            for layout in args.layouts.split(","):
                procs, conc = (int(x) for x in layout.split("x"))
                for impl in ("go", "python"):
                    r = step(c, url, db, impl, procs, conc, args.tasks, args.taskforge, run)
                    print(json.dumps(r), flush=True)
                    results.append(r)
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(30)
        psql("postgres", f"DROP DATABASE {db} WITH (FORCE)")
    for layout in args.layouts.split(","):
        for run in range(args.runs):
            g = next(r for r in results if r["impl"] == "go" and r["layout"] == layout and r["run"] == run)
            p = next(r for r in results if r["impl"] == "python" and r["layout"] == layout and r["run"] == run)
            gt, pt = float(str(g["throughput"])), float(str(p["throughput"]))
            print(f"{layout} run {run}: go {gt}/s, python {pt}/s, python/go = {pt / gt:.1%}")


if __name__ == "__main__":
    main()
