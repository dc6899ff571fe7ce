"""Celery and RQ, the Python queues the Python SDK is compared with, on
TaskForge's benchmark workloads: E1 (no-op tasks enqueued first, then drained by
1, 16 and 100 concurrent handlers), E1 preload (one client's enqueues, batched
where the system offers it), E2 (50 ms tasks, 16 handlers), latency (enqueue →
handler start at 100 tasks/s) and one enqueue's round trip. Same flags and JSON
report as the Go peers program (internal/bench/peers), so that `taskforge bench
compare --languages python` reads both alike. Needs Debian's python3-celery and
python3-rq; both use the Redis broker.

Celery runs its worker in this process with the threads pool (N threads for N
handlers; the solo pool for one), results ignored, rate limits off, prefetch multiplier 16 (its
documented settings for many short tasks). RQ runs one job at a time per worker,
so N handlers are N SimpleWorker processes (no fork per job), results not kept
(result_ttl=0); the drains use burst mode and each process reports its first
start and last return. Throughput is tasks over the span from the first handler's
start to the last handler's return; latency is enqueue → handler start on the
machine's clock.

Both refuse a Redis that already holds their keys, and delete the keys they wrote.

    /usr/bin/python3 peers.py --redis-addr HOST:PORT [--systems celery,rq] ...
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 1000


def percentile(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[int((len(s) - 1) * p / 100)] if s else 0.0


class Span:
    """A drain's first handler start and last return; done once n returned."""

    def __init__(self, n: int) -> None:
        self.n, self.first, self.last, self.returned = n, 0.0, 0.0, 0
        self.lock = threading.Lock()
        self.done = threading.Event()

    def start(self) -> None:
        now = time.time()
        with self.lock:
            if not self.first:
                self.first = now

    def end(self) -> None:
        now = time.time()
        with self.lock:
            self.last = now
            self.returned += 1
            if self.returned == self.n:
                self.done.set()

    def wait(self) -> float:
        if not self.done.wait(600):
            raise RuntimeError(f"drain of {self.n} tasks did not finish ({self.returned} returned)")
        return self.n / (self.last - self.first)


def pace(n: int, rate: float, send: Callable[[], Any]) -> None:
    t0 = time.monotonic()
    for i in range(n):
        d = t0 + i / rate - time.monotonic()
        if d > 0:
            time.sleep(d)
        send()


def time_each(n: int, f: Callable[[], Any]) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        out.append((time.perf_counter() - t0) * 1000)
    return out


# --- Celery --------------------------------------------------------------------------

class CelerySys:
    def __init__(self, redis_addr: str) -> None:
        from celery import Celery

        self.r = redis.Redis.from_url(f"redis://{redis_addr}")
        if self.r.keys("_kombu.*"):
            raise RuntimeError("Redis already holds _kombu.* keys: Celery's would mix with them")
        self.queue = f"peers-celery-{os.getpid()}"
        self.app = Celery("peers", broker=f"redis://{redis_addr}", set_as_current=True)
        self.app.conf.update(
            task_default_queue=self.queue, task_ignore_result=True, result_backend=None,
            worker_prefetch_multiplier=16, worker_disable_rate_limits=True,
            worker_hijack_root_logger=False, broker_connection_retry_on_startup=True,
            worker_send_task_events=False, task_send_sent_event=False,
        )
        self.span: Span | None = None
        self.lat: list[float] = []
        self.lat_n = 0
        self.lat_done = threading.Event()

        @self.app.task(name="bench")
        def bench(sleep_ms: int = 0, sent_at: float = 0.0) -> None:
            if sent_at:
                self.lat.append((time.time() - sent_at) * 1000)
                if len(self.lat) == self.lat_n:
                    self.lat_done.set()
                return
            sp = self.span
            assert sp is not None
            sp.start()
            if sleep_ms:
                time.sleep(sleep_ms / 1000)
            sp.end()

        self.task = bench

    def reset(self) -> None:
        self.r.delete(self.queue)

    def add_many(self, n: int, **kwargs: Any) -> None:
        with self.app.producer_or_acquire() as producer:
            for _ in range(n):
                self.task.apply_async(kwargs=kwargs, producer=producer)

    def worker(self, concurrency: int) -> Any:
        from celery.contrib.testing.worker import start_worker

        # One handler: the solo pool runs it in the consumer itself, as Celery's
        # docs advise; the threads pool with one thread hands each task over.
        pool = "solo" if concurrency == 1 else "threads"
        return start_worker(self.app, pool=pool, concurrency=concurrency, perform_ping_check=False,
                            loglevel="ERROR", shutdown_timeout=10)

    def drain(self, n: int, workers: int, sleep_ms: int) -> float:
        self.reset()
        self.add_many(n, sleep_ms=sleep_ms)
        self.span = Span(n)
        with self.worker(workers):
            return self.span.wait()

    def preload(self, n: int) -> float:
        self.reset()
        t0 = time.perf_counter()
        self.add_many(n)
        rate = n / (time.perf_counter() - t0)
        self.reset()
        return rate

    def latency(self, n: int, workers: int, rate: float) -> list[float]:
        self.reset()
        self.lat, self.lat_n = [], n
        self.lat_done.clear()
        with self.worker(workers), self.app.producer_or_acquire() as producer:
            pace(n, rate, lambda: self.task.apply_async(kwargs={"sent_at": time.time()}, producer=producer))
            if not self.lat_done.wait(60):
                raise RuntimeError(f"only {len(self.lat)} of {n} tasks arrived")
        return list(self.lat)

    def round_trips(self, n: int) -> list[float]:
        self.reset()
        out = time_each(n, lambda: self.task.apply_async())
        self.reset()
        return out

    def close(self) -> None:
        self.reset()
        for pattern in ("_kombu.*", "unacked*", "*.reply.celery.pidbox"):
            keys = self.r.keys(pattern)
            if keys:
                self.r.delete(*keys)


# --- RQ ------------------------------------------------------------------------------

class RQSys:
    def __init__(self, redis_addr: str) -> None:
        from rq import Queue

        self.addr = redis_addr
        self.r = redis.Redis.from_url(f"redis://{redis_addr}")
        if self.r.keys("rq:*"):
            raise RuntimeError("Redis already holds rq:* keys: RQ's would mix with them")
        self.name = f"peers-rq-{os.getpid()}"
        self.q = Queue(self.name, connection=self.r)
        self.lat_key = f"{self.name}:latency"
        self.tmp = tempfile.mkdtemp(prefix="peers-rq-")

    def reset(self) -> None:
        self.q.empty()
        self.r.delete(self.lat_key)

    def add_many(self, n: int, func: str, **kwargs: Any) -> None:
        from rq import Queue

        for i in range(0, n, BATCH):
            with self.r.pipeline() as pipe:
                self.q.enqueue_many([Queue.prepare_data(func, kwargs=kwargs, result_ttl=0)
                                     for _ in range(min(BATCH, n - i))], pipeline=pipe)
                pipe.execute()

    def workers(self, n: int, burst: bool) -> list[tuple[subprocess.Popen[bytes], str]]:
        out = []
        for i in range(n):
            path = os.path.join(self.tmp, f"w{i}.json")
            args = [sys.executable, __file__, "--rq-worker", self.name, "--redis-addr", self.addr, "--out", path]
            if burst:
                args.append("--burst")
            out.append((subprocess.Popen(args, cwd=HERE), path))
        return out

    def drain(self, n: int, workers: int, sleep_ms: int) -> float:
        self.reset()
        self.add_many(n, "peers_tasks.noop", sleep_ms=sleep_ms)
        ps = self.workers(workers, burst=True)
        firsts, lasts, count = [], [], 0
        for p, path in ps:
            if p.wait(600) != 0:
                raise RuntimeError(f"an RQ worker exited with status {p.returncode}")
            with open(path) as f:
                got = json.load(f)
            if got["count"]:
                firsts.append(got["first"])
                lasts.append(got["last"])
                count += got["count"]
        if count != n:
            raise RuntimeError(f"RQ workers ran {count} of {n} tasks")
        return n / (max(lasts) - min(firsts))

    def preload(self, n: int) -> float:
        self.reset()
        t0 = time.perf_counter()
        self.add_many(n, "peers_tasks.noop", sleep_ms=0)
        rate = n / (time.perf_counter() - t0)
        self.reset()
        return rate

    def latency(self, n: int, workers: int, rate: float) -> list[float]:
        self.reset()
        ps = self.workers(workers, burst=False)
        try:
            # Workers are ready once each has registered with RQ.
            from rq import Worker

            deadline = time.monotonic() + 120
            while len(Worker.all(queue=self.q)) < workers:
                if time.monotonic() > deadline:
                    raise RuntimeError("RQ workers did not start within 120 s")
                time.sleep(0.05)
            pace(n, rate, lambda: self.q.enqueue("peers_tasks.received", kwargs={"sent_at": time.time()}, result_ttl=0))
            deadline = time.monotonic() + 60
            while self.r.llen(self.lat_key) < n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {self.r.llen(self.lat_key)} of {n} tasks arrived")
                time.sleep(0.02)
            return [float(v) * 1000 for v in self.r.lrange(self.lat_key, 0, -1)]
        finally:
            for p, _ in ps:
                p.send_signal(signal.SIGTERM)
            for p, _ in ps:
                p.wait(30)

    def round_trips(self, n: int) -> list[float]:
        self.reset()
        out = time_each(n, lambda: self.q.enqueue("peers_tasks.noop", kwargs={"sleep_ms": 0}, result_ttl=0))
        self.reset()
        return out

    def close(self) -> None:
        self.reset()
        keys = self.r.keys("rq:*")
        if keys:
            self.r.delete(*keys)


def rq_worker(args: argparse.Namespace) -> None:
    """One RQ worker process: runs jobs until its queue is empty (--burst) or
    SIGTERM, then writes its figures to --out."""
    sys.path.insert(0, HERE)
    import peers_tasks
    from rq import Queue, SimpleWorker

    conn = redis.Redis.from_url(f"redis://{args.redis_addr}")
    peers_tasks._conn, peers_tasks._latency_key = conn, f"{args.rq_worker}:latency"
    w = SimpleWorker([Queue(args.rq_worker, connection=conn)], connection=conn)
    w.work(burst=args.burst, logging_level="ERROR", with_scheduler=False)
    with open(args.out, "w") as f:
        json.dump({"first": peers_tasks.first, "last": peers_tasks.last, "count": peers_tasks.count}, f)


# --- the workloads -------------------------------------------------------------------

def run_all(s: Any, name: str, cfg: argparse.Namespace) -> list[dict[str, Any]]:
    has = cfg.workloads.split(",")
    accs: list[dict[str, Any]] = []

    def add(**res: Any) -> dict[str, Any]:
        a = {"res": res, "rate": [], "lat": []}
        accs.append(a)
        return a

    e1 = [add(system=name, workload="e1", workers=w, tasks=cfg.tasks) for w in cfg.workers] if "e1" in has else []
    preload = add(system=name, workload="e1-preload", tasks=cfg.tasks) if "e1-preload" in has else None
    e2 = add(system=name, workload="e2", workers=16, tasks=cfg.sleep_tasks) if "e2" in has else None
    lat = add(system=name, workload="latency", workers=16, tasks=cfg.latency_tasks) if "latency" in has else None
    rt = add(system=name, workload="enqueue", tasks=cfg.enqueue_tasks) if "enqueue" in has else None
    # Run by run, so that noise spreads over every workload.
    for run in range(1, cfg.runs + 1):
        for a in e1:
            v = s.drain(cfg.tasks, a["res"]["workers"], 0)
            a["rate"].append(v)
            print(f"{name} run {run}: e1 {a['res']['workers']} workers {v:.0f} tasks/s", file=sys.stderr, flush=True)
        if preload:
            preload["rate"].append(s.preload(cfg.tasks))
        if e2:
            e2["rate"].append(s.drain(cfg.sleep_tasks, 16, 50))
        if lat:
            lat["lat"].append(s.latency(cfg.latency_tasks, 16, 100))
        if rt:
            rt["lat"].append(s.round_trips(cfg.enqueue_tasks))
    out = []
    for a in accs:
        r = dict(a["res"], runs=cfg.runs)
        if a["rate"]:
            r["per_sec"] = statistics.median(a["rate"])
        if a["lat"]:
            for p in (50, 95, 99):
                r[f"p{p}_ms"] = statistics.median(percentile(d, p) for d in a["lat"])
        out.append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database-url", default="", help="unused: Celery and RQ keep their queues in Redis")
    ap.add_argument("--redis-addr", default="127.0.0.1:6379")
    ap.add_argument("--systems", default="celery,rq")
    ap.add_argument("--workloads", default="e1,e1-preload,e2,latency,enqueue")
    ap.add_argument("--workers", default="1,16,100")
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--sleep-tasks", type=int, default=1600)
    ap.add_argument("--latency-tasks", type=int, default=1000)
    ap.add_argument("--enqueue-tasks", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--rq-worker", help=argparse.SUPPRESS)
    ap.add_argument("--burst", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    cfg = ap.parse_args()
    if cfg.rq_worker:
        rq_worker(cfg)
        return
    cfg.workers = [int(w) for w in cfg.workers.split(",")]
    if min(cfg.workers + [cfg.tasks, cfg.sleep_tasks, cfg.latency_tasks, cfg.enqueue_tasks, cfg.runs]) < 1:
        ap.error("counts must be at least 1")
    report: dict[str, Any] = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{os.cpu_count()} CPUs, load " + " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "results": [],
    }
    for name in cfg.systems.split(","):
        s: Any
        if name == "celery":
            s = CelerySys(cfg.redis_addr)
        elif name == "rq":
            s = RQSys(cfg.redis_addr)
        else:
            ap.error(f"--systems: unknown system {name} (celery, rq)")
        try:
            report["results"] += run_all(s, name, cfg)
        finally:
            s.close()
    for r in report["results"]:
        print(f"{r['system']:<7} {r['workload']:<11} {r.get('workers', ''):>7} {r['tasks']:>7} {r.get('per_sec', 0):>10.0f} "
              f"{r.get('p50_ms', 0):>8.2f} {r.get('p95_ms', 0):>8.2f} {r.get('p99_ms', 0):>8.2f}")
    if cfg.json:
        with open(cfg.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
