"""Fixtures for the SDK's tests. They run against a real TaskForge replica named
by TASKFORGE_URL (sdk/conformance's TestPythonSDK starts one with a 2 s lease and
runs this suite); without it they are skipped."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import taskforge


@pytest.fixture(scope="session")
def url() -> str:
    u = os.environ.get("TASKFORGE_URL")
    if not u:
        pytest.skip("TASKFORGE_URL is not set: these tests need a running TaskForge replica")
    return u


@pytest.fixture()
def client(url: str) -> Iterator[taskforge.Client]:
    with taskforge.Client(url) as c:
        yield c


@pytest.fixture()
def queue(client: taskforge.Client) -> str:
    """A fresh queue with a fast backoff, its own per test."""
    name = "py-" + uuid.uuid4().hex[:12]
    client.create_queue(name, backoff_base_ms=50, backoff_max_ms=200)
    return name


class RunningWorker:
    """A Worker running in a background thread until stop()."""

    def __init__(self, w: taskforge.Worker) -> None:
        self.worker = w
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run(handle_signals=False)
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def stop(self, timeout: float = 30.0) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        if self.error is not None:
            raise self.error


@pytest.fixture()
def start_worker(url: str) -> Iterator[Callable[..., RunningWorker]]:
    """start_worker(queue, handler, **settings) runs a worker until the test ends."""
    running: list[RunningWorker] = []

    def start(queue: str, handler: Callable[[taskforge.Job], Any], **settings: Any) -> RunningWorker:
        settings.setdefault("poll_wait", 1.0)
        settings.setdefault("shutdown_grace", 2.0)
        w = taskforge.Worker(taskforge.Client(url), **settings)
        w.handle(queue, handler)
        r = RunningWorker(w)
        running.append(r)
        return r

    yield start
    for r in running:
        if r.thread.is_alive():
            r.stop()
