"""The worker runtime against a real replica (lease 2 s, heartbeats every 0.5 s)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import pytest

import taskforge
import taskforge._http
import taskforge.worker as worker_module
from taskforge.errors import InvalidRequest

Start = Callable[..., Any]


def history(client: taskforge.Client, queue: str, task_id: str) -> list[str]:
    return [a.status for a in client.get_task(queue, task_id).attempt_history]


def test_ack_with_result_and_progress_past_the_lease(client: taskforge.Client, queue: str, start_worker: Start) -> None:
    def handler(job: taskforge.Job) -> Any:
        job.progress({"step": 1})
        time.sleep(2.6)  # past the 2 s lease: heartbeats keep it
        return {"echo": job.payload, "attempt": job.attempt}

    start_worker(queue, handler, concurrency=2)
    t = client.enqueue(queue, {"a": 1})
    done = client.wait_task(queue, t.id, timeout=20)
    assert done.status == "done" and done.result == {"echo": {"a": 1}, "attempt": 1}
    assert done.progress == {"step": 1}
    assert [a.status for a in done.attempt_history] == ["succeeded"]


def test_retry_after_permanent_and_plain_exceptions(client: taskforge.Client, queue: str, start_worker: Start) -> None:
    def handler(job: taskforge.Job) -> Any:
        kind = job.payload["kind"]
        if kind == "retry" and job.attempt == 1:
            raise taskforge.RetryableError("try later", retry_after=0.3)
        if kind == "permanent":
            raise taskforge.PermanentError("bad payload")
        if kind == "crash" and job.attempt == 1:
            raise KeyError("missing")
        return kind

    start_worker(queue, handler, concurrency=3)
    retry = client.enqueue(queue, {"kind": "retry"})
    permanent = client.enqueue(queue, {"kind": "permanent"}, max_retries=5)
    crash = client.enqueue(queue, {"kind": "crash"})

    r = client.wait_task(queue, retry.id, timeout=20)
    assert r.status == "done" and r.result == "retry"
    a1, a2 = r.attempt_history
    assert (a1.status, a1.error, a2.status) == ("failed", "try later", "succeeded")
    assert a1.finished_at and a2.started_at and (a2.started_at - a1.finished_at).total_seconds() >= 0.3

    p = client.wait_task(queue, permanent.id, timeout=20)
    assert p.status == "dead" and [a.status for a in p.attempt_history] == ["failed"]
    assert p.last_error == "bad payload"

    c = client.wait_task(queue, crash.id, timeout=20)
    assert c.status == "done"
    err = c.attempt_history[0].error or ""
    assert err.startswith("KeyError: 'missing'") and "Traceback" in err


def test_snooze_spends_no_retry(client: taskforge.Client, queue: str, start_worker: Start) -> None:
    def handler(job: taskforge.Job) -> Any:
        if job.attempt <= 2:
            raise taskforge.Snooze(0.2)
        return "ok"

    start_worker(queue, handler)
    t = client.enqueue(queue, None, max_retries=0)
    done = client.wait_task(queue, t.id, timeout=20)
    assert done.status == "done" and done.releases == 2
    assert [a.status for a in done.attempt_history] == ["released", "released", "succeeded"]
    assert "snoozed for 0.2s" in (done.attempt_history[0].error or "")


def test_cancel_requested_reaches_the_handler(client: taskforge.Client, queue: str, start_worker: Start) -> None:
    started = threading.Event()
    reasons: list[Any] = []

    def handler(job: taskforge.Job) -> Any:
        started.set()
        job.wait(15)
        reasons.append(job.stop_reason)
        job.raise_if_stopping()
        return "finished"

    start_worker(queue, handler)
    t = client.enqueue(queue, None)
    assert started.wait(10)
    assert client.cancel_task(queue, t.id).cancel_requested
    done = client.wait_task(queue, t.id, timeout=10)
    assert done.status == "cancelled"
    assert isinstance(reasons[0], taskforge.TaskCancelled)
    assert done.attempt_history[0].error == "cancelled while executing"


def test_timeout_reaches_the_handler(client: taskforge.Client, queue: str, start_worker: Start) -> None:
    reasons: list[Any] = []

    def handler(job: taskforge.Job) -> Any:
        job.wait(10)
        reasons.append(job.stop_reason)
        job.raise_if_stopping()

    start_worker(queue, handler)
    t = client.enqueue(queue, None, timeout_seconds=1, max_retries=0)
    done = client.wait_task(queue, t.id, timeout=15)
    assert [a.status for a in done.attempt_history] == ["timed_out"]
    deadline = time.monotonic() + 10  # the server may end the attempt before the handler hears
    while not reasons and time.monotonic() < deadline:
        time.sleep(0.05)
    assert isinstance(reasons[0], taskforge.TaskTimedOut)


def test_stop_releases_tasks_in_hand_without_spending_budget(
    client: taskforge.Client, queue: str, start_worker: Start
) -> None:
    held = threading.Semaphore(0)

    def handler(job: taskforge.Job) -> Any:
        held.release()
        job.wait()
        assert isinstance(job.stop_reason, taskforge.WorkerStopping)

    r = start_worker(queue, handler, concurrency=2, shutdown_grace=0.3)
    ids = [client.enqueue(queue, {"n": i}, max_retries=0).id for i in range(2)]
    assert held.acquire(timeout=10) and held.acquire(timeout=10)
    began = time.monotonic()
    r.stop()
    assert time.monotonic() - began < 5  # the open long poll is abandoned, not waited out
    for i in ids:
        t = client.get_task(queue, i)
        assert t.status in ("pending", "claimed") and t.releases == 1 and t.attempts == 1
        assert [a.status for a in t.attempt_history] == ["released"]


def test_short_tasks_prefetch_and_ack_on_polls(
    client: taskforge.Client, queue: str, start_worker: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"ack": 0, "ack_batch": 0, "poll_acks": 0, "prefetch": 0}
    orig_ack, orig_batch, orig_poll = taskforge.Client.ack, taskforge.Client.ack_batch_minimal, taskforge.Client.poll

    def ack(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        calls["ack"] += 1
        return orig_ack(self, *a, **k)

    def ack_batch(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        calls["ack_batch"] += 1
        return orig_batch(self, *a, **k)

    def poll(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        calls["poll_acks"] += len(k.get("acks") or [])
        calls["prefetch"] += bool(k.get("prefetch_tasks"))
        return orig_poll(self, *a, **k)

    monkeypatch.setattr(taskforge.Client, "ack", ack)
    monkeypatch.setattr(taskforge.Client, "ack_batch_minimal", ack_batch)
    monkeypatch.setattr(taskforge.Client, "poll", poll)

    n = 40
    tasks = client.enqueue_batch(queue, [taskforge.NewTask(payload=i) for i in range(n)])

    def handler(job: taskforge.Job) -> Any:
        time.sleep(0.01)
        return job.payload * 2

    start_worker(queue, handler, concurrency=2, prefetch=2)
    for t in tasks:
        assert client.wait_task(queue, t.id, timeout=30).result == t.payload * 2
    assert calls["poll_acks"] > 0, calls  # with every slot busy, acks ride on the next poll
    assert calls["prefetch"] > 0, calls  # handlers run short: the worker claims ahead of its slots


def test_one_poll_asks_for_free_slots_and_prefetch_room(
    client: taskforge.Client, queue: str, start_worker: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    polls: list[tuple[int, int, bool]] = []
    orig_poll = taskforge.Client.poll

    def poll(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        polls.append((k.get("max_tasks", 1), k.get("prefetch_tasks", 0), bool(k.get("prefetch"))))
        return orig_poll(self, *a, **k)

    monkeypatch.setattr(taskforge.Client, "poll", poll)
    tasks = client.enqueue_batch(queue, [taskforge.NewTask(payload=i) for i in range(40)])
    start_worker(queue, lambda job: None, concurrency=2, prefetch=2)
    for t in tasks:
        assert client.wait_task(queue, t.id, timeout=30).status == "done"
    # A prefetch set stays: at most two free and two prefetched.
    assert all(n <= 4 and pre <= 2 and not old for n, pre, old in polls), polls
    # Free slots and prefetch room go in one poll. How many of each a poll finds
    # depends on when it goes: with a second poll out, (4, 2) may never come, as
    # (3, 2) and (1, 1) do (the poll out asked for the rest).
    assert any(0 < pre < n for n, pre, _ in polls), polls


def drain(client: taskforge.Client, queue: str, n: int, start_worker: Start, caplog: pytest.LogCaptureFixture,
          **settings: Any) -> None:
    """Enqueues n tasks in batches of 500 and runs a worker with settings and a
    no-op handler until its handlers have run all n, then stops it at once, while
    the last acks are still held for a poll or on their way. run returns only
    once every ack is committed or its failure reported (an ack refused: the lease
    was lost, say while a busy box delayed it past the 2 s lease), so the queue,
    read once after it, shows all n done but the ones reported."""
    caplog.set_level(logging.WARNING, logger="taskforge.worker")
    for done in range(0, n, 500):
        client.enqueue_batch(queue, [taskforge.NewTask(payload=done + i) for i in range(min(500, n - done))])
    lock = threading.Lock()
    ran: set[str] = set()
    all_ran = threading.Event()

    def handler(job: taskforge.Job) -> None:
        with lock:
            ran.add(job.id)
            if len(ran) == n:
                all_ran.set()

    r = start_worker(queue, handler, **settings)
    assert all_ran.wait(60), f"the handlers ran {len(ran)} of {n} tasks within 60 s"
    r.stop()
    done = client.stats(queue).depth.get("done", 0)
    refused = sum("refused" in rec.getMessage() for rec in caplog.records)
    assert done + refused == n, (f"{done} of {n} tasks done and {refused} acks reported refused when run returned: "
                                 "it returned before every ack was committed")


def test_run_returns_only_after_every_held_ack_is_committed(
    client: taskforge.Client, queue: str, start_worker: Start, caplog: pytest.LogCaptureFixture
) -> None:
    drain(client, queue, 1000, start_worker, caplog, concurrency=8)


def test_the_default_prefetch_room_grows_while_handlers_outrun_polls(
    client: taskforge.Client, queue: str, start_worker: Start, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    asked: list[int] = []
    orig_poll = taskforge.Client.poll

    def poll(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        asked.append(k.get("max_tasks", 1))
        return orig_poll(self, *a, **k)

    monkeypatch.setattr(taskforge.Client, "poll", poll)
    drain(client, queue, 1000, start_worker, caplog, concurrency=2)  # the default prefetch: the concurrency, adapting
    # Two slots and, by default, two prefetched at first; then up to a full poll.
    assert 4 < max(asked) <= 100, (max(asked), len(asked))


class _PollsOut:
    """The most polls that were out at once, and the most tasks they asked for."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.out = self.out_tasks = 0
        self.most_polls = self.most_tasks = 0
        self.polls: list[tuple[int, int]] = []


def _polls_out(monkeypatch: pytest.MonkeyPatch) -> _PollsOut:
    p = _PollsOut()
    orig_poll = taskforge.Client.poll

    def poll(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        n = k.get("max_tasks", 1)
        with p.lock:
            p.polls.append((n, k.get("prefetch_tasks", 0)))
            p.out += 1
            p.out_tasks += n
            p.most_polls = max(p.most_polls, p.out)
            p.most_tasks = max(p.most_tasks, p.out_tasks)
        try:
            return orig_poll(self, *a, **k)
        finally:
            with p.lock:
                p.out -= 1
                p.out_tasks -= n

    monkeypatch.setattr(taskforge.Client, "poll", poll)
    return p


def test_handlers_that_outrun_polls_keep_a_second_poll_out_never_a_third(
    client: taskforge.Client, queue: str, start_worker: Start, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = _polls_out(monkeypatch)
    drain(client, queue, 3000, start_worker, caplog, concurrency=16)
    assert p.most_polls == 2, f"at most {p.most_polls} polls were out at once over {len(p.polls)} polls"


def test_a_set_prefetch_polls_out_at_once_never_ask_beyond_slots_and_prefetch(
    client: taskforge.Client, queue: str, start_worker: Start, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = _polls_out(monkeypatch)
    drain(client, queue, 500, start_worker, caplog, concurrency=4, prefetch=4)
    assert all(n <= 8 and pre <= 4 for n, pre in p.polls), p.polls
    assert p.most_tasks <= 8, f"the polls out at once asked for {p.most_tasks} tasks: beyond 4 slots and a prefetch of 4"


def test_a_server_older_than_prefetch_tasks(
    client: taskforge.Client, queue: str, start_worker: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    polls: list[tuple[bool, int]] = []
    orig_poll = taskforge.Client.poll

    def poll(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        refused = k.get("prefetch_tasks", 0) > 0
        polls.append((refused, k.get("prefetch_tasks", 0)))
        if refused:
            raise InvalidRequest(400, "invalid_request", 'json: unknown field "prefetch_tasks"')
        return orig_poll(self, *a, **k)

    monkeypatch.setattr(taskforge.Client, "poll", poll)
    tasks = client.enqueue_batch(queue, [taskforge.NewTask(payload=i) for i in range(40)])
    start_worker(queue, lambda job: None, concurrency=4)
    for t in tasks:
        assert client.wait_task(queue, t.id, timeout=30).status == "done"
    first = next((i for i, (refused, _) in enumerate(polls) if refused), -1)
    assert first >= 0, "the worker never sent prefetch_tasks; the test proves nothing"
    assert all(not refused and pre == 0 for refused, pre in polls[first + 1:]), polls


class _AckCalls:
    """Counts the worker's polls and the acks it sends alone; second_poll is set as
    the second poll goes out."""

    def __init__(self) -> None:
        self.polls = 0
        self.alone = 0
        self.second_poll = threading.Event()


def _count_ack_calls(monkeypatch: pytest.MonkeyPatch) -> _AckCalls:
    calls = _AckCalls()
    orig_ack, orig_batch, orig_poll = taskforge.Client.ack, taskforge.Client.ack_batch_minimal, taskforge.Client.poll

    def ack(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        calls.alone += 1
        return orig_ack(self, *a, **k)

    def ack_batch(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        calls.alone += 1
        return orig_batch(self, *a, **k)

    def poll(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        calls.polls += 1
        if calls.polls >= 2:
            calls.second_poll.set()
        return orig_poll(self, *a, **k)

    monkeypatch.setattr(taskforge.Client, "ack", ack)
    monkeypatch.setattr(taskforge.Client, "ack_batch_minimal", ack_batch)
    monkeypatch.setattr(taskforge.Client, "poll", poll)
    return calls


def test_held_ack_does_not_wait_behind_a_long_poll(
    client: taskforge.Client, queue: str, start_worker: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ack held for the next poll does not wait behind a poll waiting for work.

    The first poll brings both tasks it asked for; the first fails, and its freed
    slot sends a poll without acks that waits up to 30 s; the second task returns
    while that poll is out, so its ack is held up to 50 ms, then goes alone or on a
    second poll (which, carrying acks, the server answers at once). Either way one
    request takes it, well before the 30 s poll.
    """
    calls = _count_ack_calls(monkeypatch)
    client.enqueue(queue, "fail")
    t = client.enqueue(queue, "second")

    def handler(job: taskforge.Job) -> Any:
        if job.payload == "fail":
            raise taskforge.PermanentError("fails at once")
        calls.second_poll.wait(10)
        return None

    start_worker(queue, handler, concurrency=2, poll_wait=30.0)
    # 20 s: well under the 30 s the held ack would wait for that poll.
    assert client.wait_task(queue, t.id, timeout=20).status == "done"
    # The ack's request: an ack alone, or a third poll.
    assert calls.alone + max(calls.polls - 2, 0) == 1, vars(calls)


def test_ack_after_a_short_poll_goes_at_once(
    client: taskforge.Client, queue: str, start_worker: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a poll that brought fewer tasks than it asked for, an ack is not held.

    The hold is stretched past the test's wait, so only an ack sent at once ends the
    task in time.
    """
    monkeypatch.setattr(worker_module, "_POLL_ACK_HOLD", 60.0)
    calls = _count_ack_calls(monkeypatch)
    t = client.enqueue(queue, 1)

    def handler(job: taskforge.Job) -> Any:
        # Two slots: the first poll asks for 2 and brings 1; the next waits up to 30 s.
        calls.second_poll.wait(10)
        return None

    start_worker(queue, handler, concurrency=2, poll_wait=30.0)
    assert client.wait_task(queue, t.id, timeout=20).status == "done"
    assert calls.alone == 1, vars(calls)


def test_bad_queue_name_ends_run(url: str) -> None:
    w = taskforge.Worker(url, poll_wait=0.5)
    w.handle("not a valid name!", lambda job: None)
    with pytest.raises(taskforge.InvalidRequest):
        w.run(handle_signals=False)


def test_outage_is_retried_and_stop_still_returns() -> None:
    w = taskforge.Worker("http://127.0.0.1:1", poll_wait=0.5, retry_min=0.05, retry_max=0.2)
    w.handle("q", lambda job: None)
    t = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
    t.start()
    time.sleep(1)
    assert t.is_alive()  # polls failed and were retried: run goes on
    w.stop()
    t.join(5)
    assert not t.is_alive()


def test_heartbeats_failing_past_the_lease_stop_the_handler(
    client: taskforge.Client, queue: str, start_worker: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = threading.Event()
    failing.set()
    # Both heartbeat routes fail: batch rounds, or one per task on a server without them.
    for name in ("heartbeat", "heartbeat_batch"):
        orig = getattr(taskforge.Client, name)

        def fail(self: taskforge.Client, *a: Any, _orig: Any = orig, **k: Any) -> Any:
            if failing.is_set():
                raise taskforge.Unavailable(0, "unavailable", "injected outage")
            return _orig(self, *a, **k)

        monkeypatch.setattr(taskforge.Client, name, fail)
    reasons: list[Any] = []

    def handler(job: taskforge.Job) -> Any:
        if job.attempt == 1:
            job.wait(15)
            reasons.append(job.stop_reason)
            failing.clear()
            return "too late"  # not reported: the lease is gone
        return "second"

    start_worker(queue, handler)
    t = client.enqueue(queue, None)
    done = client.wait_task(queue, t.id, timeout=30)
    # The server reclaims first: the worker's estimate of the expiry errs late
    # (the Date header counts whole seconds), so that it never gives up a lease
    # the server still honours.
    deadline = time.monotonic() + 10
    while not reasons and time.monotonic() < deadline:
        time.sleep(0.05)
    assert isinstance(reasons[0], taskforge.LeaseExpired)
    assert done.status == "done" and done.result == "second"
    assert [a.status for a in done.attempt_history] == ["abandoned", "succeeded"]


def test_stop_waits_for_the_answer_of_a_poll_that_carries_acks(
    client: taskforge.Client, queue: str, start_worker: Start, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stop abandons a long poll, not one that carries acks: the server answers
    those at once, and an answer the worker did not read leaves the acks' fate
    unknown. The first poll carrying acks is answered (its acks committed), and its
    answer is handed over only once shutdown has aborted the polls: as the
    transport would have failed it, had it been aborted. The worker must not send
    those acks again (refused: the leases are gone)."""
    aborted = threading.Event()
    orig_abort = taskforge._http.Transport.abort_all

    def abort_all(self: taskforge._http.Transport) -> None:
        orig_abort(self)
        aborted.set()

    monkeypatch.setattr(taskforge._http.Transport, "abort_all", abort_all)
    held = threading.Event()
    carried: list[str] = []
    orig_poll = taskforge.Client.poll

    def poll(self: taskforge.Client, *a: Any, **k: Any) -> Any:
        res = orig_poll(self, *a, **k)
        if k.get("acks") and not held.is_set():
            carried.extend(item["task_id"] for item in k["acks"])
            held.set()
            assert aborted.wait(20), "the worker did not stop"
            if self._t._closed:
                raise taskforge.Unavailable(0, "unavailable", "POST /workers/poll: aborted before its answer was read")
        return res

    monkeypatch.setattr(taskforge.Client, "poll", poll)
    client.enqueue_batch(queue, [taskforge.NewTask(payload=i) for i in range(20)])
    r = start_worker(queue, lambda job: None, concurrency=2)
    assert held.wait(20), "no poll carried acks"
    caplog.set_level(logging.WARNING, logger="taskforge.worker")
    r.stop()
    assert [client.get_task(queue, i).status for i in carried] == ["done"] * len(carried)
    refused = [rec.getMessage() for rec in caplog.records if "refused" in rec.getMessage()]
    assert not refused, refused
