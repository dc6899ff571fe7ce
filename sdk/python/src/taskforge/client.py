"""The producer client: one method per route of the HTTP API (docs/api.md)."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterable, Iterator
from datetime import datetime
from enum import Enum
from typing import Any, Final

from ._http import Transport
from .errors import TaskForgeError
from .types import (
    AckResult,
    BulkCancel,
    Group,
    GroupPage,
    LeaseResult,
    LeaseState,
    NewTask,
    PolledTask,
    PollResult,
    Queue,
    Schedule,
    Stats,
    Task,
    TaskPage,
    WorkerInfo,
    _time,
)

__all__ = ["Client", "UNSET", "MAX_WAIT_MS"]


class _Unset(Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


#: Leaves a field of an update as it is (the default of every update argument);
#: None sends JSON null, which clears an optional setting.
UNSET: Final = _Unset.UNSET

#: The longest wait one ``GET …?wait_ms`` may ask for.
MAX_WAIT_MS: Final = 30_000

# Asks the batch enqueue and the batch ack for an answer without the task objects
# the caller does not need (RFC 7240; docs/api.md, "Minimal answers").
_PREFER_MINIMAL: Final = {"Prefer": "return=minimal"}


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _fields(**kv: Any) -> dict[str, Any]:
    return {k: v for k, v in kv.items() if v is not UNSET}


def _group_path(queue: str, group: str) -> str:
    return f"/queues/{_q(queue)}/groups/{_q(group)}"


def _timestr(v: datetime | str | None) -> str | None:
    if isinstance(v, datetime):
        return v.isoformat()
    return v


class Client:
    """A client for one TaskForge server (or a load balancer in front of several).

    Thread-safe; each thread reuses its own kept-alive connection. Methods raise
    an :class:`~taskforge.errors.APIError` subclass for an error answer, and
    :class:`~taskforge.errors.Unavailable` when no answer came. Client methods
    never retry; the worker runtime does.

    ``token`` is sent as ``Authorization: Bearer``; ``timeout`` (seconds) bounds
    each request (a wait or a long poll gets its wait on top).
    """

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        self.url = url
        self._token = token
        self._t = Transport(url, token=token, timeout=timeout)

    def close(self) -> None:
        """Closes the kept-alive connections."""
        self._t.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- queues -------------------------------------------------------------

    def create_queue(
        self,
        name: str,
        *,
        max_retries: int | None = None,
        rate_limit: float | None = None,
        rate_burst: int | None = None,
        max_concurrency: int | None = None,
        backoff_base_ms: int | None = None,
        backoff_max_ms: int | None = None,
        paused: bool | None = None,
        priority_aging_ms: int | None = None,
        retention: dict[str, int | None] | None = None,
        idempotency_window_ms: int | None = None,
        fairness: str | None = None,
        group_max_concurrency: int | None = None,
        group_rate_limit: float | None = None,
        group_rate_burst: int | None = None,
    ) -> Queue:
        """Creates a queue (409 :class:`QueueExists` when the name is taken).
        Unset settings take the server's defaults. ``retention`` sets ages among
        ``done_ms``, ``cancelled_ms`` and ``dead_ms`` (at least 60000, or None =
        forever); the others follow the server's default. ``fairness="round_robin"``
        makes the queue's groups take weighted turns; the ``group_*`` settings are
        the limits of each group (see :meth:`put_group` for one group's own)."""
        body: dict[str, Any] = {"name": name, **{k: v for k, v in dict[str, Any](
            max_retries=max_retries, rate_limit=rate_limit, rate_burst=rate_burst,
            max_concurrency=max_concurrency, backoff_base_ms=backoff_base_ms,
            backoff_max_ms=backoff_max_ms, paused=paused, priority_aging_ms=priority_aging_ms,
            retention=retention, idempotency_window_ms=idempotency_window_ms, fairness=fairness,
            group_max_concurrency=group_max_concurrency, group_rate_limit=group_rate_limit,
            group_rate_burst=group_rate_burst,
        ).items() if v is not None}}
        return Queue.from_json(self._t.request("POST", "/queues", body=body).body)

    def list_queues(self) -> list[Queue]:
        """Every queue."""
        return [Queue.from_json(q) for q in self._t.request("GET", "/queues").body["queues"]]

    def get_queue(self, name: str) -> Queue:
        """One queue (404 :class:`QueueNotFound`)."""
        return Queue.from_json(self._t.request("GET", f"/queues/{_q(name)}").body)

    def update_queue(
        self,
        name: str,
        *,
        max_retries: int | _Unset = UNSET,
        rate_limit: float | None | _Unset = UNSET,
        rate_burst: int | None | _Unset = UNSET,
        max_concurrency: int | None | _Unset = UNSET,
        backoff_base_ms: int | _Unset = UNSET,
        backoff_max_ms: int | _Unset = UNSET,
        paused: bool | _Unset = UNSET,
        priority_aging_ms: int | None | _Unset = UNSET,
        retention: dict[str, int | None] | None | _Unset = UNSET,
        idempotency_window_ms: int | _Unset = UNSET,
        fairness: str | None | _Unset = UNSET,
        group_max_concurrency: int | None | _Unset = UNSET,
        group_rate_limit: float | None | _Unset = UNSET,
        group_rate_burst: int | None | _Unset = UNSET,
    ) -> Queue:
        """Changes the settings given; None clears an optional limit. ``retention``
        changes the ages it names (None = forever) and keeps the others;
        ``retention=None`` puts every age back to the server's default.
        ``fairness=None`` puts the queue back in one line."""
        body = _fields(max_retries=max_retries, rate_limit=rate_limit, rate_burst=rate_burst,
                       max_concurrency=max_concurrency, backoff_base_ms=backoff_base_ms,
                       backoff_max_ms=backoff_max_ms, paused=paused, priority_aging_ms=priority_aging_ms,
                       retention=retention, idempotency_window_ms=idempotency_window_ms, fairness=fairness,
                       group_max_concurrency=group_max_concurrency, group_rate_limit=group_rate_limit,
                       group_rate_burst=group_rate_burst)
        return Queue.from_json(self._t.request("PATCH", f"/queues/{_q(name)}", body=body).body)

    def delete_queue(self, name: str) -> None:
        """Deletes a queue without unfinished or dead tasks (409 :class:`QueueNotEmpty`)."""
        self._t.request("DELETE", f"/queues/{_q(name)}")

    def pause_queue(self, name: str) -> Queue:
        """Stops dispatching the queue's tasks."""
        return Queue.from_json(self._t.request("POST", f"/queues/{_q(name)}/pause").body)

    def resume_queue(self, name: str) -> Queue:
        """Dispatches the queue's tasks again."""
        return Queue.from_json(self._t.request("POST", f"/queues/{_q(name)}/resume").body)

    def stats(self, queue: str) -> Stats:
        """Depth by status, throughput, error rate, oldest pending age, DLQ depth."""
        return Stats.from_json(self._t.request("GET", f"/queues/{_q(queue)}/stats").body)

    # --- groups of a fair queue ---------------------------------------------

    def put_group(
        self,
        queue: str,
        group: str,
        *,
        weight: int | None = None,
        max_concurrency: int | None = None,
        rate_limit: float | None = None,
        rate_burst: int | None = None,
    ) -> Group:
        """Replaces a group's overrides of its queue's group defaults (a setting
        left None: the queue's default; weight 1) and returns the group; every
        replica's next pop applies them. :class:`InvalidRequest` for a bad group
        name or setting, :class:`QueueNotFound`."""
        body = {"weight": weight, "max_concurrency": max_concurrency, "rate_limit": rate_limit,
                "rate_burst": rate_burst}
        return Group.from_json(self._t.request("PUT", _group_path(queue, group), body=body).body)

    def get_group(self, queue: str, group: str) -> Group:
        """One group: its overrides, the settings in effect and its counts
        (404 :class:`GroupNotFound` for a group with no tasks and no overrides)."""
        return Group.from_json(self._t.request("GET", _group_path(queue, group)).body)

    def delete_group(self, queue: str, group: str) -> None:
        """Forgets a group's overrides; its tasks stay."""
        self._t.request("DELETE", _group_path(queue, group))

    def list_groups(self, queue: str, *, active: bool = False, limit: int | None = None,
                    cursor: str | None = None) -> GroupPage:
        """One page of the queue's groups, by name; ``active`` lists only those with
        pending, claimed or executing tasks."""
        query = {"active": "true" if active else None, "limit": limit, "cursor": cursor}
        out = self._t.request("GET", f"/queues/{_q(queue)}/groups", query=query).body
        return GroupPage([Group.from_json(g) for g in out["groups"]], out.get("next_cursor"))

    def iter_groups(self, queue: str, *, active: bool = False, limit: int | None = None) -> Iterator[Group]:
        """Every group of the queue (``active``: as :meth:`list_groups`), page after page."""
        cursor: str | None = None
        while True:
            page = self.list_groups(queue, active=active, limit=limit, cursor=cursor)
            yield from page.groups
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    # --- tasks --------------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        payload: Any = None,
        *,
        priority: int | None = None,
        scheduled_at: datetime | str | None = None,
        max_retries: int | None = None,
        timeout_seconds: int | None = None,
        idempotency_key: str | None = None,
        debounce_key: str | None = None,
        debounce_ms: int | None = None,
        debounce_max_ms: int | None = None,
        traceparent: str | None = None,
        group: str | None = None,
    ) -> Task:
        """Enqueues one task. The same ``idempotency_key`` with the same request
        returns the existing task; with a different one, :class:`IdempotencyConflict`.
        With a ``debounce_key`` (see :class:`NewTask`) it returns the waiting task it
        replaced (``debounced`` > 0), or the task it created."""
        nt = NewTask(payload=payload, priority=priority, scheduled_at=scheduled_at, max_retries=max_retries,
                     timeout_seconds=timeout_seconds, idempotency_key=idempotency_key, debounce_key=debounce_key,
                     debounce_ms=debounce_ms, debounce_max_ms=debounce_max_ms, group=group)
        headers = {"traceparent": traceparent} if traceparent else None
        return Task.from_json(self._t.request("POST", f"/queues/{_q(queue)}/tasks", body=nt.to_json(),
                                              headers=headers).body)

    def enqueue_batch(self, queue: str, tasks: Iterable[NewTask | dict[str, Any]]) -> list[Task]:
        """Enqueues 1 to 1,000 tasks in one transaction, all or nothing; the tasks
        come back in input order. A dict is sent as an enqueue body as it is."""
        bodies = [t.to_json() if isinstance(t, NewTask) else t for t in tasks]
        out = self._t.request("POST", f"/queues/{_q(queue)}/tasks/batch", body={"tasks": bodies}).body
        return [Task.from_json(t) for t in out["tasks"]]

    def enqueue_batch_minimal(self, queue: str, tasks: Iterable[NewTask | dict[str, Any]]) -> list[str]:
        """:meth:`enqueue_batch` for bulk loads: returns only the new tasks' ids, in
        input order, and asks the server for nothing more (``Prefer: return=minimal``),
        so that neither side encodes or decodes a task object per task. The same
        validation and the same all-or-nothing commit; :class:`TaskForgeError` when
        the answer does not hold one id per task sent."""
        bodies = [t.to_json() if isinstance(t, NewTask) else t for t in tasks]
        out = self._t.request("POST", f"/queues/{_q(queue)}/tasks/batch", body={"tasks": bodies},
                              headers=_PREFER_MINIMAL).body
        got = out.get("tasks") if isinstance(out, dict) else None
        if not isinstance(got, list) or len(got) != len(bodies):
            n = len(got) if isinstance(got, list) else 0
            raise TaskForgeError(f"enqueue of {len(bodies)} tasks to {queue!r}: the server answered {n} ids")
        ids = [t.get("id") if isinstance(t, dict) else None for t in got]
        if not all(isinstance(i, str) and i for i in ids):
            raise TaskForgeError(f"enqueue of {len(bodies)} tasks to {queue!r}: the server answered a task without an id")
        return [str(i) for i in ids]

    def get_task(self, queue: str, task_id: str, *, wait_ms: int | None = None) -> Task:
        """A task with its attempt history. With ``wait_ms`` (≤ 30,000) the server
        holds the request until the task is done, dead or cancelled, or the wait
        ends: check ``status`` (or ``terminal``)."""
        query = None
        timeout = None
        if wait_ms:
            query = {"wait_ms": int(wait_ms)}
            timeout = self._t.timeout + wait_ms / 1000
        return Task.from_json(self._t.request("GET", f"/queues/{_q(queue)}/tasks/{_q(task_id)}",
                                              query=query, timeout=timeout).body)

    def wait_task(self, queue: str, task_id: str, timeout: float | None = None) -> Task:
        """Waits, in server-side waits of at most 30 s, until the task is done,
        dead or cancelled, or ``timeout`` seconds pass (None: no limit), and
        returns it as last read: check ``terminal``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = MAX_WAIT_MS if deadline is None else int((deadline - time.monotonic()) * 1000)
            task = self.get_task(queue, task_id, wait_ms=min(max(left, 0), MAX_WAIT_MS))
            if task.terminal or left <= 0:
                return task

    def list_tasks(
        self,
        queue: str,
        *,
        status: str | None = None,
        worker_id: str | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        group: str | None = None,
    ) -> TaskPage:
        """One page of the queue's tasks, newest first (``group``: only that group's)."""
        query = {"status": status, "worker_id": worker_id, "group": group, "created_after": _timestr(created_after),
                 "created_before": _timestr(created_before), "limit": limit, "cursor": cursor}
        out = self._t.request("GET", f"/queues/{_q(queue)}/tasks", query=query).body
        return TaskPage([Task.from_json(t) for t in out["tasks"]], out.get("next_cursor"))

    def iter_tasks(self, queue: str, **filters: Any) -> Iterator[Task]:
        """Every task matching the filters of :meth:`list_tasks`, page after page."""
        cursor = None
        while True:
            page = self.list_tasks(queue, cursor=cursor, **filters)
            yield from page.tasks
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def cancel_task(self, queue: str, task_id: str) -> Task:
        """Cancels a task: ``cancelled`` at once, or ``cancel_requested`` while it
        executes (it stops at its worker's next heartbeat). A finished task:
        :class:`TaskNotCancellable`."""
        return Task.from_json(self._t.request("DELETE", f"/queues/{_q(queue)}/tasks/{_q(task_id)}").body)

    def cancel_tasks(self, queue: str, ids: Iterable[str]) -> BulkCancel:
        """Cancels up to 1,000 tasks by id; finished or unknown ids are skipped."""
        return self._bulk_cancel(queue, {"ids": list(ids)})

    def cancel_by_status(self, queue: str, status: str) -> BulkCancel:
        """Cancels every ``pending``, ``retry`` or ``blocked`` task of the queue
        (executing ones are never touched). Large queues take a while: the server
        works in batches."""
        return self._bulk_cancel(queue, {"status": status}, timeout=max(self._t.timeout, 600.0))

    def _bulk_cancel(self, queue: str, body: dict[str, Any], timeout: float | None = None) -> BulkCancel:
        out = self._t.request("POST", f"/queues/{_q(queue)}/tasks/cancel", body=body, timeout=timeout).body
        return BulkCancel(cancelled=out["cancelled"], cancel_requested=out["cancel_requested"])

    # --- dead-letter queue --------------------------------------------------

    def list_dead(self, queue: str, *, limit: int | None = None, cursor: str | None = None) -> TaskPage:
        """One page of the queue's dead tasks, most recently died first."""
        out = self._t.request("GET", f"/queues/{_q(queue)}/dlq", query={"limit": limit, "cursor": cursor}).body
        return TaskPage([Task.from_json(t) for t in out["tasks"]], out.get("next_cursor"))

    def iter_dead(self, queue: str) -> Iterator[Task]:
        """Every dead task of the queue, page after page."""
        cursor = None
        while True:
            page = self.list_dead(queue, cursor=cursor)
            yield from page.tasks
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def replay_dead(self, queue: str, task_id: str) -> Task:
        """Replays a dead task as a new one (``replayed_from`` = the dead id)."""
        return Task.from_json(self._t.request("POST", f"/queues/{_q(queue)}/dlq/{_q(task_id)}/replay").body)

    def replay_dead_tasks(self, queue: str, ids: Iterable[str]) -> list[Task]:
        """Replays up to 1,000 dead tasks, all or nothing."""
        out = self._t.request("POST", f"/queues/{_q(queue)}/dlq/replay", body={"ids": list(ids)}).body
        return [Task.from_json(t) for t in out["replayed"]]

    def replay_all_dead(self, queue: str) -> list[Task]:
        """Replays every dead task of the queue."""
        out = self._t.request("POST", f"/queues/{_q(queue)}/dlq/replay", body={"all": True},
                              timeout=max(self._t.timeout, 600.0)).body
        return [Task.from_json(t) for t in out["replayed"]]

    def discard_dead(self, queue: str, task_id: str) -> None:
        """Deletes a dead task and its attempts for good."""
        self._t.request("DELETE", f"/queues/{_q(queue)}/dlq/{_q(task_id)}")

    def discard_dead_tasks(self, queue: str, ids: Iterable[str]) -> int:
        """Deletes up to 1,000 dead tasks by id (others are skipped); how many went."""
        out = self._t.request("DELETE", f"/queues/{_q(queue)}/dlq", body={"ids": list(ids)}).body
        return int(out["discarded"])

    def discard_all_dead(self, queue: str) -> int:
        """Deletes every dead task of the queue; how many went."""
        out = self._t.request("DELETE", f"/queues/{_q(queue)}/dlq", body={"all": True},
                              timeout=max(self._t.timeout, 600.0)).body
        return int(out["discarded"])

    # --- schedules ----------------------------------------------------------

    def create_schedule(
        self,
        name: str,
        queue: str,
        cron: str,
        payload: Any = None,
        *,
        timezone: str | None = None,
        priority: int | None = None,
        max_retries: int | None = None,
        timeout_seconds: int | None = None,
        paused: bool | None = None,
    ) -> Schedule:
        """Creates a cron schedule that enqueues ``payload`` on every tick."""
        body: dict[str, Any] = {"name": name, "queue": queue, "cron": cron, "payload": payload}
        body.update({k: v for k, v in dict(timezone=timezone, priority=priority, max_retries=max_retries,
                                            timeout_seconds=timeout_seconds, paused=paused).items() if v is not None})
        return Schedule.from_json(self._t.request("POST", "/schedules", body=body).body)

    def list_schedules(self, queue: str | None = None) -> list[Schedule]:
        """Every schedule (of one queue, when given), by name."""
        out = self._t.request("GET", "/schedules", query={"queue": queue}).body
        return [Schedule.from_json(s) for s in out["schedules"]]

    def get_schedule(self, name: str) -> Schedule:
        """One schedule (404 :class:`ScheduleNotFound`)."""
        return Schedule.from_json(self._t.request("GET", f"/schedules/{_q(name)}").body)

    def update_schedule(
        self,
        name: str,
        *,
        queue: str | _Unset = UNSET,
        cron: str | _Unset = UNSET,
        timezone: str | _Unset = UNSET,
        payload: Any = UNSET,
        priority: int | _Unset = UNSET,
        max_retries: int | None | _Unset = UNSET,
        timeout_seconds: int | None | _Unset = UNSET,
        paused: bool | _Unset = UNSET,
    ) -> Schedule:
        """Changes the fields given; None clears ``max_retries`` / ``timeout_seconds``."""
        body = _fields(queue=queue, cron=cron, timezone=timezone, payload=payload, priority=priority,
                       max_retries=max_retries, timeout_seconds=timeout_seconds, paused=paused)
        return Schedule.from_json(self._t.request("PATCH", f"/schedules/{_q(name)}", body=body).body)

    def delete_schedule(self, name: str) -> None:
        """Deletes a schedule; the tasks it created stay."""
        self._t.request("DELETE", f"/schedules/{_q(name)}")

    def trigger_schedule(self, name: str) -> Task:
        """Enqueues the schedule's task now; its next tick is unchanged."""
        return Task.from_json(self._t.request("POST", f"/schedules/{_q(name)}/trigger").body)

    # --- worker protocol (the Worker runtime uses these) -----------------------

    def poll(
        self,
        worker_id: str,
        queues: list[str],
        *,
        max_tasks: int = 1,
        wait_ms: int = 0,
        prefetch: bool = False,
        acks: list[dict[str, Any]] | None = None,
        prefetch_tasks: int = 0,
    ) -> PollResult:
        """Claims up to ``max_tasks`` tasks, waiting up to ``wait_ms`` for the
        first. ``prefetch_tasks`` (0..max_tasks) of them are for the worker to hold
        until a slot frees: the first ``max_tasks - prefetch_tasks`` come from any
        queue, the rest only from queues without a concurrency cap (``prefetch``:
        all of them, as servers older than ``prefetch_tasks`` understand it; such a
        server refuses a poll with ``prefetch_tasks``, InvalidRequest). ``acks``
        (``{task_id, lease_token, result}``, ≤ 100) are committed first; their
        outcomes come back in ``PollResult.acks``."""
        body: dict[str, Any] = {"worker_id": worker_id, "queues": queues, "max_tasks": max(max_tasks, 1),
                                "wait_ms": int(wait_ms)}
        if prefetch:
            body["prefetch"] = True
        if prefetch_tasks > 0:
            body["prefetch_tasks"] = prefetch_tasks
        if acks:
            body["acks"] = acks
        r = self._t.request("POST", "/workers/poll", body=body, timeout=self._t.timeout + wait_ms / 1000)
        out = r.body or {}
        res = PollResult([PolledTask.from_json(t) for t in out.get("tasks") or []],
                         retry_after=(out.get("retry_after_ms") or 0) / 1000, date=r.date)
        if acks:
            res.acks = [AckResult(task_id=a["task_id"], error=_ack_error(a.get("error"))) for a in out.get("acks") or []]
        return res

    def heartbeat(self, worker_id: str, task_id: str | None = None, lease_token: str | None = None,
                  *, progress: Any = UNSET, timeout: float | None = None) -> LeaseState:
        """Extends a lease (or, without a task, records the worker as alive). With
        ``progress`` (any JSON value ≤ 4 KiB; None clears), also replaces the
        task's progress. :class:`LeaseLost` when the lease is gone."""
        body: dict[str, Any] = {"worker_id": worker_id}
        if task_id:
            body["task_id"] = task_id
            body["lease_token"] = lease_token
        if progress is not UNSET:
            body["progress"] = progress
        r = self._t.request("POST", "/workers/heartbeat", body=body, timeout=timeout)
        out = r.body or {}
        return LeaseState(_time(out.get("lease_expires_at")), bool(out.get("cancel_requested")), r.date)

    def heartbeat_batch(self, worker_id: str, leases: list[tuple[str, str]], *,
                        timeout: float | None = None) -> list[LeaseResult]:
        """Extends up to 1,000 leases (``(task_id, lease_token)`` pairs) in one
        request; each comes back extended or refused on its own, in order.
        :class:`NotFound` from a server without ``/workers/heartbeat/batch``."""
        body = {"worker_id": worker_id, "leases": [{"task_id": t, "lease_token": tok} for t, tok in leases]}
        r = self._t.request("POST", "/workers/heartbeat/batch", body=body, timeout=timeout)
        got = (r.body or {}).get("leases") or []
        if len(got) != len(leases) or any(g.get("task_id") != t for g, (t, _) in zip(got, leases)):
            raise ValueError(f"heartbeat of {len(leases)} tasks: the answer does not match the request")
        return [LeaseResult(task_id=g["task_id"], lease_expires_at=_time(g.get("lease_expires_at")),
                            cancel_requested=bool(g.get("cancel_requested")), error=_ack_error(g.get("error")),
                            date=r.date) for g in got]

    def ack(self, worker_id: str, task_id: str, lease_token: str, result: Any = UNSET) -> Task:
        """Reports a task done, with ``result`` when given."""
        body: dict[str, Any] = {"worker_id": worker_id, "task_id": task_id, "lease_token": lease_token}
        if result is not UNSET:
            body["result"] = result
        return Task.from_json(self._t.request("POST", "/workers/ack", body=body).body)

    def ack_batch(self, worker_id: str, acks: list[dict[str, Any]]) -> list[AckResult]:
        """Acks up to 100 tasks (``{task_id, lease_token, result}``) in one commit;
        each item is acked (``task``: the done task) or refused (``error``:
        ``lease_lost``) on its own, in the order sent. An APIError means none was
        acked; :class:`TaskForgeError`, that the answer does not match the acks sent."""
        return self._ack_batch(worker_id, acks, minimal=False)

    def ack_batch_minimal(self, worker_id: str, acks: list[dict[str, Any]]) -> list[AckResult]:
        """:meth:`ack_batch` for a worker that does not need the done tasks back:
        each result's ``task`` is None, and the server encodes none
        (``Prefer: return=minimal``). The worker runtime's batched acks use it."""
        return self._ack_batch(worker_id, acks, minimal=True)

    def _ack_batch(self, worker_id: str, acks: list[dict[str, Any]], *, minimal: bool) -> list[AckResult]:
        out = self._t.request("POST", "/workers/ack/batch", body={"worker_id": worker_id, "acks": acks},
                              headers=_PREFER_MINIMAL if minimal else None).body
        got = out.get("results") if isinstance(out, dict) else None
        if (not isinstance(got, list) or len(got) != len(acks)
                or any(not isinstance(r, dict) or r.get("task_id") != a.get("task_id") for r, a in zip(got, acks))):
            raise TaskForgeError(f"ack of {len(acks)} tasks: the answer does not match the request")
        return [AckResult(task_id=r["task_id"], error=_ack_error(r.get("error")),
                          task=Task.from_json(r["task"]) if r.get("task") and not minimal else None) for r in got]

    def nack(self, worker_id: str, task_id: str, lease_token: str, error: str, *, retryable: bool = True,
             retry_after_ms: int | None = None) -> Task:
        """Reports a failed attempt: retried (after ``retry_after_ms`` when given,
        else the queue's backoff) while budget is left, unless not retryable."""
        body: dict[str, Any] = {"worker_id": worker_id, "task_id": task_id, "lease_token": lease_token,
                                "error": error, "retryable": retryable}
        if retry_after_ms is not None:
            body["retry_after_ms"] = int(retry_after_ms)
        return Task.from_json(self._t.request("POST", "/workers/nack", body=body).body)

    def release(self, worker_id: str, task_id: str, lease_token: str, *, reason: str | None = None,
                delay_ms: int | None = None) -> Task:
        """Hands a task back without spending its retry budget; with ``delay_ms``
        (≤ 86,400,000) it is due again that much later (a snooze)."""
        body: dict[str, Any] = {"worker_id": worker_id, "task_id": task_id, "lease_token": lease_token}
        if reason is not None:
            body["reason"] = reason
        if delay_ms is not None:
            body["delay_ms"] = int(delay_ms)
        return Task.from_json(self._t.request("POST", "/workers/release", body=body).body)

    def list_workers(self) -> list[WorkerInfo]:
        """The workers the server has seen."""
        return [WorkerInfo.from_json(w) for w in self._t.request("GET", "/workers").body["workers"]]

    def healthz(self) -> None:
        """Raises unless the server process answers."""
        self._t.request("GET", "/healthz")

    def readyz(self) -> None:
        """Raises :class:`Unavailable` unless PostgreSQL and Redis answer."""
        self._t.request("GET", "/readyz")


def _ack_error(e: Any) -> str | None:
    if e is None:
        return None
    if isinstance(e, dict):
        return str(e.get("code") or e)
    return str(e)

