"""Minimal answers (``Prefer: return=minimal``) of the batch enqueue and the batch
ack: against the real replica, what the client sent and what came back on the
wire; against a stand-in server, answers that do not match the request."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import taskforge

Start = Callable[..., Any]


class Exchange:
    """One request as http.client sent it, and the answer's Preference-Applied."""

    def __init__(self, method: str, url: str, headers: dict[str, str]) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.applied: str | None = None


@pytest.fixture()
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Exchange]]:
    """Records every request http.client sends (its headers as sent) and the
    Preference-Applied header of its answer."""
    seen: list[Exchange] = []
    lock = threading.Lock()
    orig_request, orig_getresponse = http.client.HTTPConnection.request, http.client.HTTPConnection.getresponse

    def request(self: http.client.HTTPConnection, method: str, url: str, body: Any = None,
                headers: Any = None, **kw: Any) -> None:
        ex = Exchange(method, url, dict(headers or {}))
        with lock:
            seen.append(ex)
        self._tf_exchange = ex  # type: ignore[attr-defined]
        orig_request(self, method, url, body=body, headers=headers or {}, **kw)

    def getresponse(self: http.client.HTTPConnection) -> http.client.HTTPResponse:
        resp = orig_getresponse(self)
        ex: Exchange | None = getattr(self, "_tf_exchange", None)
        if ex is not None:
            ex.applied = resp.getheader("Preference-Applied")
        return resp

    monkeypatch.setattr(http.client.HTTPConnection, "request", request)
    monkeypatch.setattr(http.client.HTTPConnection, "getresponse", getresponse)
    yield seen


def posts(seen: list[Exchange], suffix: str) -> list[Exchange]:
    return [e for e in seen if e.method == "POST" and e.url.endswith(suffix)]


def test_enqueue_batch_minimal_returns_the_ids_in_order(
    client: taskforge.Client, queue: str, wire: list[Exchange]
) -> None:
    tasks: list[taskforge.NewTask | dict[str, Any]] = [
        taskforge.NewTask(payload={"n": i}, priority=i + 1) for i in range(4)]
    tasks.append({"payload": None, "priority": 9})
    ids = client.enqueue_batch_minimal(queue, tasks)

    assert len(ids) == 5 and len(set(ids)) == 5 and all(isinstance(i, str) and i for i in ids)
    for i, id_ in enumerate(ids):  # the i-th id is the i-th task sent
        t = client.get_task(queue, id_)
        assert t.queue == queue and t.status in ("pending", "claimed")
        if i < 4:
            assert (t.payload, t.priority) == ({"n": i}, i + 1)
        else:
            assert (t.payload, t.priority) == (None, 9)
    assert len(list(client.iter_tasks(queue))) == 5

    sent = posts(wire, "/tasks/batch")
    assert len(sent) == 1
    assert sent[0].headers.get("Prefer") == "return=minimal"
    assert sent[0].applied == "return=minimal"  # the server honoured it: ids only

    full = client.enqueue_batch(queue, [taskforge.NewTask(payload="full")])
    assert full[0].payload == "full" and full[0].status in ("pending", "claimed")
    sent = posts(wire, "/tasks/batch")
    assert "Prefer" not in sent[1].headers and sent[1].applied is None


def test_enqueue_batch_minimal_is_all_or_nothing(client: taskforge.Client, queue: str) -> None:
    with pytest.raises(taskforge.InvalidRequest) as e:
        client.enqueue_batch_minimal(queue, [taskforge.NewTask(payload=1), taskforge.NewTask(payload=2, priority=11)])
    assert e.value.status == 400 and "tasks[1]" in e.value.message
    assert client.list_tasks(queue).tasks == []
    with pytest.raises(taskforge.QueueNotFound):
        client.enqueue_batch_minimal(queue + "-missing", [taskforge.NewTask(payload=1)])


def test_ack_batch_minimal_acks_and_refuses_each_item(
    client: taskforge.Client, queue: str, wire: list[Exchange]
) -> None:
    ids = client.enqueue_batch_minimal(queue, [taskforge.NewTask(payload=i) for i in range(3)])
    got = client.poll("py-tester", [queue], max_tasks=3, wait_ms=5000).tasks
    assert sorted(p.id for p in got) == sorted(ids)
    a, b, c = got
    # c's lease token goes stale: handed back, then claimed again under a new one.
    client.release("py-tester", c.id, c.lease_token, reason="test")
    again = client.poll("py-tester", [queue], wait_ms=5000).tasks
    assert [p.id for p in again] == [c.id] and again[0].lease_token != c.lease_token

    results = client.ack_batch_minimal("py-tester", [
        {"task_id": a.id, "lease_token": a.lease_token, "result": {"a": 1}},
        {"task_id": b.id, "lease_token": b.lease_token},
        {"task_id": c.id, "lease_token": c.lease_token, "result": "stale"},
    ])
    assert [r.task_id for r in results] == [a.id, b.id, c.id]
    assert [r.error for r in results] == [None, None, "lease_lost"]
    assert all(r.task is None for r in results)

    sent = posts(wire, "/workers/ack/batch")
    assert len(sent) == 1
    assert sent[0].headers.get("Prefer") == "return=minimal" and sent[0].applied == "return=minimal"

    ta, tb, tc = (client.get_task(queue, x.id) for x in (a, b, c))
    assert (ta.status, ta.result) == ("done", {"a": 1}) and [x.status for x in ta.attempt_history] == ["succeeded"]
    assert (tb.status, tb.result) == ("done", None)
    assert tc.status == "executing" and tc.result is None  # still held under the new lease
    assert client.ack("py-tester", c.id, again[0].lease_token, "fresh").status == "done"

    # The full variant, for comparison: the same outcomes, with the done task.
    d = client.enqueue(queue, "d")
    p = client.poll("py-tester", [queue], wait_ms=5000).tasks[0]
    full = client.ack_batch("py-tester", [{"task_id": p.id, "lease_token": p.lease_token, "result": 7},
                                          {"task_id": c.id, "lease_token": c.lease_token}])
    assert full[0].task is not None and (full[0].task.id, full[0].task.status, full[0].task.result) == (d.id, "done", 7)
    assert (full[1].error, full[1].task) == ("lease_lost", None)
    assert "Prefer" not in posts(wire, "/workers/ack/batch")[1].headers


def test_the_worker_acks_batches_the_minimal_way(
    client: taskforge.Client, queue: str, start_worker: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"ack_batch": 0, "ack_batch_minimal": 0, "acked_in_batches": 0}
    orig_ack, orig_minimal = taskforge.Client.ack, taskforge.Client.ack_batch_minimal

    def slow_ack(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        time.sleep(0.3)  # the acks finishing meanwhile queue up behind this one
        return orig_ack(self, *a, **k)

    def full(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        calls["ack_batch"] += 1
        raise AssertionError("the worker asked for the done tasks back")

    def minimal(self: taskforge.Client, worker_id: str, acks: list[dict[str, Any]]) -> Any:
        calls["ack_batch_minimal"] += 1
        calls["acked_in_batches"] += len(acks)
        return orig_minimal(self, worker_id, acks)

    monkeypatch.setattr(taskforge.Client, "ack", slow_ack)
    monkeypatch.setattr(taskforge.Client, "ack_batch", full)
    monkeypatch.setattr(taskforge.Client, "ack_batch_minimal", minimal)

    n = 6
    ids = client.enqueue_batch_minimal(queue, [taskforge.NewTask(payload=i) for i in range(n)])
    gate = threading.Barrier(n, timeout=20)
    big = "x" * (20 << 10)  # over what a poll carries: these acks go on their own

    def handler(job: taskforge.Job) -> Any:
        gate.wait()
        return {"n": job.payload, "pad": big}

    start_worker(queue, handler, concurrency=n, prefetch=0)
    for i, id_ in enumerate(ids):
        t = client.wait_task(queue, id_, timeout=30)
        assert t.status == "done" and t.result == {"n": i, "pad": big}
        assert [a.status for a in t.attempt_history] == ["succeeded"]
    assert calls["ack_batch"] == 0
    assert calls["ack_batch_minimal"] >= 1 and calls["acked_in_batches"] >= 2, calls


class FakeServer:
    """Answers every POST with a canned 200 body and records the requests."""

    def __init__(self, answer: Any) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, dict(self.headers.items()), body))
                data = json.dumps(answer).encode()
                self.send_response(201 if self.path.endswith("/tasks/batch") else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("answer", [
    {"tasks": [{"id": "0190a4a0-0000-7000-8000-000000000001"}]},  # one id for two tasks
    {"tasks": [{"id": "0190a4a0-0000-7000-8000-000000000001"}, {}]},  # a task without an id
    {},
])
def test_enqueue_batch_minimal_refuses_an_answer_without_an_id_per_task(answer: Any) -> None:
    fake = FakeServer(answer)
    try:
        with taskforge.Client(fake.url) as c, pytest.raises(taskforge.TaskForgeError) as e:
            c.enqueue_batch_minimal("q", [taskforge.NewTask(payload=1), {"payload": 2}])
        assert not isinstance(e.value, taskforge.APIError)
        path, headers, body = fake.requests[0]
        assert path == "/queues/q/tasks/batch" and headers.get("Prefer") == "return=minimal"
        assert body == {"tasks": [{"payload": 1}, {"payload": 2}]}
    finally:
        fake.close()


def test_ack_batch_minimal_refuses_an_answer_that_does_not_match() -> None:
    fake = FakeServer({"results": [{"task_id": "b"}, {"task_id": "a"}]})  # out of order
    try:
        with taskforge.Client(fake.url) as c:
            with pytest.raises(taskforge.TaskForgeError):
                c.ack_batch_minimal("w", [{"task_id": "a", "lease_token": "t"}, {"task_id": "b", "lease_token": "t"}])
            with pytest.raises(taskforge.TaskForgeError):
                c.ack_batch_minimal("w", [{"task_id": "b", "lease_token": "t"}])  # two results for one ack
            ok = c.ack_batch_minimal("w", [{"task_id": "b", "lease_token": "t"}, {"task_id": "a", "lease_token": "t"}])
            assert [(r.task_id, r.error, r.task) for r in ok] == [("b", None, None), ("a", None, None)]
    finally:
        fake.close()
