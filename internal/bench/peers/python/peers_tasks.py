"""RQ's job functions for peers.py, in a module of their own so that the worker
processes import them by name. Each worker process keeps its own figures:
``noop`` notes the first handler start and the last return (the drains), and
``received`` pushes enqueue → handler start to a Redis list that peers.py counts
(the latency stream, where workers never run out of work to exit on)."""

from __future__ import annotations

import time

import redis

first = 0.0
last = 0.0
count = 0
_conn: redis.Redis | None = None
_latency_key = ""


def noop(sleep_ms: int) -> None:
    global first, last, count
    now = time.time()
    if not first:
        first = now
    if sleep_ms > 0:
        time.sleep(sleep_ms / 1000)
    last = time.time()
    count += 1


def received(sent_at: float) -> None:
    lat = time.time() - sent_at
    assert _conn is not None
    _conn.rpush(_latency_key, lat)
