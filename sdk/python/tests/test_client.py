"""The producer client against a real replica."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

import taskforge


def test_queue_crud_pause_resume_stats(client: taskforge.Client, queue: str) -> None:
    q = client.get_queue(queue)
    assert q.name == queue and q.max_retries == 3 and not q.paused
    assert isinstance(q.created_at, datetime) and q.created_at.tzinfo is not None
    assert queue in [x.name for x in client.list_queues()]

    q = client.update_queue(queue, max_retries=5, rate_limit=10.0)
    assert q.max_retries == 5 and q.rate_limit == 10.0 and q.rate_burst == 10
    q = client.update_queue(queue, rate_limit=None)  # None clears; absent fields stay
    assert q.rate_limit is None and q.max_retries == 5

    week = 7 * 24 * 3_600_000
    assert q.retention == taskforge.Retention(done_ms=week, cancelled_ms=week, dead_ms=None)
    q = client.update_queue(queue, retention={"done_ms": 3_600_000, "dead_ms": 30 * 24 * 3_600_000})
    assert q.retention == taskforge.Retention(done_ms=3_600_000, cancelled_ms=week, dead_ms=30 * 24 * 3_600_000)
    q = client.update_queue(queue, retention={"cancelled_ms": None})
    assert q.retention is not None and q.retention.cancelled_ms is None and q.retention.done_ms == 3_600_000
    with pytest.raises(taskforge.InvalidRequest):
        client.update_queue(queue, retention={"done_ms": 1_000})
    q = client.update_queue(queue, retention=None)
    assert q.retention == taskforge.Retention(done_ms=week, cancelled_ms=week, dead_ms=None)

    assert client.pause_queue(queue).paused
    assert not client.resume_queue(queue).paused
    st = client.stats(queue)
    assert st.queue == queue and st.depth.get("pending") == 0 and st.dlq_depth == 0

    client.delete_queue(queue)
    with pytest.raises(taskforge.QueueNotFound) as e:
        client.get_queue(queue)
    assert e.value.status == 404 and e.value.code == "queue_not_found" and e.value.message


def test_errors_carry_the_api_code(client: taskforge.Client, queue: str) -> None:
    with pytest.raises(taskforge.QueueExists) as e:
        client.create_queue(queue)
    assert isinstance(e.value, taskforge.Conflict) and e.value.code == "queue_exists" and e.value.status == 409
    with pytest.raises(taskforge.InvalidRequest) as e2:
        client.enqueue(queue, {}, priority=11)
    assert e2.value.code == "invalid_request"
    with pytest.raises(taskforge.TaskNotFound):
        client.get_task(queue, "0190a4a0-0000-7000-8000-000000000000")
    client.enqueue(queue, {"a": 1}, idempotency_key="k")
    with pytest.raises(taskforge.IdempotencyConflict):
        client.enqueue(queue, {"a": 2}, idempotency_key="k")


def test_unreachable_server_is_unavailable() -> None:
    with pytest.raises(taskforge.Unavailable) as e:
        taskforge.Client("http://127.0.0.1:1", timeout=2).healthz()
    assert e.value.status == 0 and e.value.code == "unavailable"


def test_enqueue_batch_get_list_cancel(client: taskforge.Client, queue: str) -> None:
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    t = client.enqueue(queue, {"n": 0}, priority=2, scheduled_at=later, max_retries=1, timeout_seconds=30,
                       idempotency_key="first")
    assert t.status == "pending" and t.priority == 2 and t.max_retries == 1 and t.timeout_seconds == 30
    again = client.enqueue(queue, {"n": 0}, priority=2, scheduled_at=later, max_retries=1, timeout_seconds=30,
                           idempotency_key="first")
    assert again.id == t.id

    batch = client.enqueue_batch(queue, [taskforge.NewTask(payload={"n": i}, scheduled_at=later) for i in (1, 2, 3)]
                                 + [{"payload": None, "scheduled_at": later.isoformat()}])
    assert [b.payload for b in batch] == [{"n": 1}, {"n": 2}, {"n": 3}, None]

    got = client.get_task(queue, t.id)
    assert got.payload == {"n": 0} and got.attempt_history == [] and not got.terminal

    page = client.list_tasks(queue, limit=2)
    assert len(page.tasks) == 2 and page.next_cursor
    assert len(list(client.iter_tasks(queue, status="pending"))) == 5

    assert client.cancel_task(queue, t.id).status == "cancelled"
    with pytest.raises(taskforge.TaskNotCancellable):
        client.cancel_task(queue, t.id)
    bc = client.cancel_tasks(queue, [batch[0].id, t.id])
    assert (bc.cancelled, bc.cancel_requested) == (1, 0)
    bc = client.cancel_by_status(queue, "pending")
    assert bc.cancelled == 3


def test_debounce_replaces_the_waiting_task(client: taskforge.Client, queue: str) -> None:
    a = client.enqueue(queue, {"rev": 1}, debounce_key="doc-1", debounce_ms=60_000)
    assert a.status == "pending" and a.debounce_key == "doc-1" and a.debounced == 0
    assert a.scheduled_at is not None and a.created_at is not None
    assert a.scheduled_at - a.created_at == timedelta(minutes=1)
    b = client.enqueue(queue, {"rev": 2}, priority=1, debounce_key="doc-1", debounce_ms=60_000,
                       debounce_max_ms=600_000)
    assert b.id == a.id and b.debounced == 1 and b.payload == {"rev": 2} and b.priority == 1
    c, d = client.enqueue_batch(queue, [taskforge.NewTask(payload=3, debounce_key="doc-1", debounce_ms=1_000),
                                        taskforge.NewTask(payload=4)])
    assert c.id == a.id and c.debounced == 2 and d.debounce_key is None
    assert client.get_task(queue, a.id).debounced == 2
    with pytest.raises(taskforge.InvalidRequest):
        client.enqueue(queue, 5, debounce_key="doc-1")
    with pytest.raises(taskforge.InvalidRequest):
        client.enqueue(queue, 5, debounce_key="doc-1", debounce_ms=1_000, idempotency_key="i")


def test_idempotency_window_setting(client: taskforge.Client, queue: str) -> None:
    assert client.get_queue(queue).idempotency_window_ms == 86_400_000
    assert client.update_queue(queue, idempotency_window_ms=3_600_000).idempotency_window_ms == 3_600_000
    with pytest.raises(taskforge.InvalidRequest):
        client.update_queue(queue, idempotency_window_ms=-1)


def test_get_task_wait_returns_when_the_task_finishes(client: taskforge.Client, queue: str) -> None:
    t = client.enqueue(queue, {"x": 1})
    # A wait that ends before the task does: a 200 with the unfinished task.
    assert client.get_task(queue, t.id, wait_ms=100).status != "done"

    def finish() -> None:
        time.sleep(0.3)
        p = client.poll("py-tester", [queue], wait_ms=5000)
        client.ack("py-tester", p.tasks[0].id, p.tasks[0].lease_token, {"ok": True})

    threading.Thread(target=finish).start()
    began = time.monotonic()
    done = client.get_task(queue, t.id, wait_ms=10_000)
    assert done.status == "done" and done.result == {"ok": True}
    assert time.monotonic() - began < 5
    assert [a.status for a in done.attempt_history] == ["succeeded"]
    assert client.wait_task(queue, t.id, timeout=1).status == "done"


def test_dead_letter_queue(client: taskforge.Client, queue: str) -> None:
    ids = [client.enqueue(queue, {"n": i}).id for i in range(4)]
    for _ in ids:
        p = client.poll("py-tester", [queue], wait_ms=5000).tasks[0]
        dead = client.nack("py-tester", p.id, p.lease_token, "boom", retryable=False)
        assert dead.status == "dead" and dead.last_error == "boom"
    page = client.list_dead(queue)
    assert sorted(t.id for t in page.tasks) == sorted(ids) and all(t.died_at for t in page.tasks)

    replayed = client.replay_dead(queue, ids[0])
    assert replayed.replayed_from == ids[0] and replayed.status == "pending"
    many = client.replay_dead_tasks(queue, ids[1:3])
    assert sorted(t.replayed_from or "" for t in many) == sorted(ids[1:3])
    assert [t.replay_count for t in client.iter_dead(queue) if t.id == ids[0]] == [1]

    client.discard_dead(queue, ids[0])
    assert client.discard_dead_tasks(queue, [ids[1], "0190a4a0-0000-7000-8000-000000000000"]) == 1
    assert client.discard_all_dead(queue) == 2
    assert client.list_dead(queue).tasks == []
    with pytest.raises(taskforge.NotFound):
        client.replay_dead(queue, ids[0])


def test_duplicate_request_names_the_discarded_task(client: taskforge.Client, queue: str) -> None:
    t = client.enqueue(queue, {"n": 1}, idempotency_key="order-7", max_retries=0)
    p = client.poll("py-tester", [queue], wait_ms=5000).tasks[0]
    assert p.id == t.id
    client.nack("py-tester", p.id, p.lease_token, "boom", retryable=False)
    client.discard_dead(queue, t.id)
    with pytest.raises(taskforge.DuplicateRequest) as e:
        client.enqueue(queue, {"n": 1}, idempotency_key="order-7", max_retries=0)
    assert isinstance(e.value, taskforge.Conflict) and e.value.status == 409
    assert e.value.code == "duplicate_request" and e.value.task_id == t.id and t.id in e.value.message
    client.enqueue(queue, {"n": 1}, idempotency_key="other")
    with pytest.raises(taskforge.IdempotencyConflict) as e2:
        client.enqueue(queue, {"n": 2}, idempotency_key="other")
    assert e2.value.task_id is None


def test_schedules(client: taskforge.Client, queue: str) -> None:
    name = queue + "-nightly"
    s = client.create_schedule(name, queue, "30 2 * * *", {"report": "daily"}, timezone="Europe/Berlin", priority=3)
    assert s.queue == queue and s.timezone == "Europe/Berlin" and s.next_run_at is not None
    with pytest.raises(taskforge.ScheduleExists):
        client.create_schedule(name, queue, "30 2 * * *", None)
    assert name in [x.name for x in client.list_schedules(queue=queue)]
    s = client.update_schedule(name, paused=True, max_retries=2)
    assert s.paused and s.next_run_at is None and s.max_retries == 2
    assert client.update_schedule(name, max_retries=None).max_retries is None
    t = client.trigger_schedule(name)
    assert t.schedule == name and t.payload == {"report": "daily"}
    assert client.get_schedule(name).last_task_id == t.id
    client.delete_schedule(name)
    with pytest.raises(taskforge.ScheduleNotFound):
        client.get_schedule(name)


def test_connections_are_reused(client: taskforge.Client, queue: str) -> None:
    for _ in range(5):
        client.get_queue(queue)
    assert len(client._t._conns) == 1


def test_group_on_enqueue_and_task(client: taskforge.Client, queue: str) -> None:
    a = client.enqueue(queue, 1, group="acme")
    assert a.group == "acme"
    b, c = client.enqueue_batch(queue, [taskforge.NewTask(payload=2, group="beta"), taskforge.NewTask(payload=3)])
    assert b.group == "beta" and c.group is None
    assert client.get_task(queue, a.id).group == "acme"
    with pytest.raises(taskforge.InvalidRequest):
        client.enqueue(queue, 4, group="not a group")
