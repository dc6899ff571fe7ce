"""The API's objects as dataclasses. Each is built from the server's JSON with
``from_json``, which ignores fields this SDK does not know yet (a newer server
stays readable) and turns RFC 3339 times into aware datetimes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

__all__ = [
    "Queue",
    "Retention",
    "Task",
    "Attempt",
    "TaskPage",
    "Group",
    "GroupLimits",
    "GroupPage",
    "Stats",
    "BulkCancel",
    "Schedule",
    "NewTask",
    "PolledTask",
    "PollResult",
    "AckResult",
    "LeaseState",
    "LeaseResult",
    "WorkerInfo",
    "TaskStatus",
    "TERMINAL",
]

TaskStatus = Literal["pending", "claimed", "executing", "retry", "done", "dead", "cancelled", "blocked"]

#: The statuses a task never leaves.
TERMINAL = frozenset({"done", "dead", "cancelled"})

T = TypeVar("T")


def _time(v: Any) -> datetime | None:
    if isinstance(v, str) and v:
        t = datetime.fromisoformat(v)
        return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)
    return None


def _build(cls: type[T], d: dict[str, Any]) -> T:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in d:
            continue
        v = d[f.name]
        if f.name.endswith("_at"):
            v = _time(v)
        kwargs[f.name] = v
    return cls(**kwargs)


@dataclass
class Queue:
    """A queue and its settings (times and limits as the API gives them)."""

    name: str
    max_retries: int = 3
    rate_limit: float | None = None
    rate_burst: int | None = None
    max_concurrency: int | None = None
    backoff_base_ms: int = 0
    backoff_max_ms: int = 0
    paused: bool = False
    priority_aging_ms: int | None = None
    #: How long finished tasks are kept, the server's defaults filled in.
    retention: Retention | None = None
    idempotency_window_ms: int = 86_400_000
    #: "round_robin" when the queue's groups take turns; None = one line.
    fairness: str | None = None
    #: The defaults of each group (None = unlimited); a group's overrides win.
    group_max_concurrency: int | None = None
    group_rate_limit: float | None = None
    group_rate_burst: int | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Queue:
        q = _build(cls, d)
        if isinstance(q.retention, dict):
            q.retention = Retention.from_json(q.retention)
        return q


@dataclass
class Retention:
    """How long a queue keeps its tasks after they finish, per final status, in
    milliseconds; None keeps them forever."""

    done_ms: int | None = None
    cancelled_ms: int | None = None
    dead_ms: int | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Retention:
        return _build(cls, d)


@dataclass
class Attempt:
    """One attempt of a task: ``status`` is ``executing``, ``succeeded``, ``failed``,
    ``abandoned``, ``timed_out``, ``cancelled`` or ``released``."""

    attempt: int
    worker_id: str = ""
    status: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Attempt:
        return _build(cls, d)


@dataclass
class Task:
    """A task as the API shows it. ``payload``, ``result`` and ``progress`` are the
    decoded JSON values. ``attempt_history`` is filled by ``get_task`` only;
    ``died_at`` by dead-letter listings only."""

    id: str
    queue: str
    payload: Any = None
    priority: int = 5
    status: str = "pending"
    scheduled_at: datetime | None = None
    attempts: int = 0
    max_retries: int = 0
    timeout_seconds: int | None = None
    idempotency_key: str | None = None
    last_error: str | None = None
    result: Any = None
    claimed_by: str | None = None
    heartbeat_at: datetime | None = None
    lease_expires_at: datetime | None = None
    cancel_requested: bool = False
    replayed_from: str | None = None
    replay_count: int = 0
    replayed_at: datetime | None = None
    releases: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    died_at: datetime | None = None
    progress: Any = None
    schedule: str | None = None
    debounce_key: str | None = None
    debounced: int = 0
    #: The task's group in a fair queue; None = the queue's unnamed group.
    group: str | None = None
    attempt_history: list[Attempt] = field(default_factory=list)

    @property
    def terminal(self) -> bool:
        """Whether the task has finished for good (done, dead or cancelled)."""
        return self.status in TERMINAL

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Task:
        t = _build(cls, d)
        t.attempt_history = [Attempt.from_json(a) for a in d.get("attempt_history") or []]
        return t


@dataclass
class TaskPage:
    """One page of a listing, newest first; ``next_cursor`` is None on the last."""

    tasks: list[Task]
    next_cursor: str | None


@dataclass
class GroupLimits:
    """The settings in effect for a group: its overrides, else its queue's group
    defaults; None = unlimited."""

    weight: int = 1
    max_concurrency: int | None = None
    rate_limit: float | None = None
    rate_burst: int | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GroupLimits:
        return _build(cls, d)


@dataclass
class Group:
    """A group of a fair queue (``GET /queues/:name/groups/:group``): its overrides
    (None = the queue's default), the settings in ``effective``, and its tasks by
    status (exact). ``claimed`` tasks are buffered, not yet taken by a worker."""

    group: str
    weight: int | None = None
    max_concurrency: int | None = None
    rate_limit: float | None = None
    rate_burst: int | None = None
    effective: GroupLimits = field(default_factory=GroupLimits)
    pending: int = 0
    blocked: int = 0
    claimed: int = 0
    executing: int = 0
    retry: int = 0
    dead: int = 0

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Group:
        g = _build(cls, d)
        g.effective = GroupLimits.from_json(d.get("effective") or {})
        return g


@dataclass
class GroupPage:
    """One page of a group listing, by group name; ``next_cursor`` is None on the last."""

    groups: list[Group]
    next_cursor: str | None


@dataclass
class Stats:
    """A queue's figures (``GET /queues/:name/stats``)."""

    queue: str
    depth: dict[str, int] = field(default_factory=dict)
    throughput_per_sec: float = 0.0
    error_rate: float = 0.0
    oldest_pending_age_seconds: float = 0.0
    dlq_depth: int = 0

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Stats:
        return _build(cls, d)


@dataclass
class BulkCancel:
    """What a bulk cancel did: tasks cancelled now, and executing ones asked to stop."""

    cancelled: int
    cancel_requested: int


@dataclass
class Schedule:
    """A cron schedule (see docs/schedules.md)."""

    name: str
    queue: str
    cron: str
    timezone: str = "UTC"
    payload: Any = None
    priority: int = 5
    max_retries: int | None = None
    timeout_seconds: int | None = None
    paused: bool = False
    next_run_at: datetime | None = None
    last_run_at: datetime | None = None
    last_task_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Schedule:
        return _build(cls, d)


@dataclass
class NewTask:
    """An enqueue request. Unset fields take the server's defaults (priority 5,
    the queue's max_retries, no timeout, due now). ``scheduled_at`` is a datetime
    (aware) or an RFC 3339 string.

    ``debounce_key`` (with ``debounce_ms``, and optionally ``debounce_max_ms``):
    while the queue's task with that key is pending, never attempted and not yet
    due, the enqueue replaces it (same id; this payload, priority, budget and
    timeout; due ``debounce_ms`` from now, never past its first enqueue +
    ``debounce_max_ms``; ``debounced`` + 1); otherwise it creates a task due
    ``debounce_ms`` from now. It excludes ``idempotency_key`` and ``scheduled_at``."""

    payload: Any = None
    priority: int | None = None
    scheduled_at: datetime | str | None = None
    max_retries: int | None = None
    timeout_seconds: int | None = None
    idempotency_key: str | None = None
    debounce_key: str | None = None
    debounce_ms: int | None = None
    debounce_max_ms: int | None = None
    #: The task's group in a fair queue (1..200 of A-Z a-z 0-9 . _ : @ -); None =
    #: the queue's unnamed group.
    group: str | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"payload": self.payload}
        if self.priority is not None:
            body["priority"] = self.priority
        if self.scheduled_at is not None:
            s = self.scheduled_at
            body["scheduled_at"] = s.isoformat() if isinstance(s, datetime) else s
        if self.max_retries is not None:
            body["max_retries"] = self.max_retries
        if self.timeout_seconds is not None:
            body["timeout_seconds"] = self.timeout_seconds
        if self.idempotency_key is not None:
            body["idempotency_key"] = self.idempotency_key
        for name in ("debounce_key", "debounce_ms", "debounce_max_ms", "group"):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        return body


@dataclass
class PolledTask:
    """A task handed to a worker under a lease (``POST /workers/poll``)."""

    id: str
    queue: str
    payload: Any = None
    priority: int = 5
    attempt: int = 1
    lease_token: str = ""
    lease_expires_at: datetime | None = None
    heartbeat_interval_ms: int = 0
    timeout_seconds: int | None = None
    traceparent: str | None = None
    #: The task's group; None = the queue's unnamed group.
    group: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PolledTask:
        return _build(cls, d)


@dataclass
class AckResult:
    """The outcome of one ack of a batch (or of a poll's acks): ``error`` is the
    code (``lease_lost``) when it was refused; ``task`` the done task when the
    batch endpoint returned it."""

    task_id: str
    error: str | None = None
    task: Task | None = None


@dataclass
class PollResult:
    """A poll's answer: the tasks claimed (empty when none arrived in time), the
    rate-limit hint of an empty answer (seconds, 0 when none), and the outcomes of
    the acks the poll carried, in order."""

    tasks: list[PolledTask]
    retry_after: float = 0.0
    acks: list[AckResult] = field(default_factory=list)
    date: datetime | None = None


@dataclass
class LeaseState:
    """A lease after a heartbeat; ``date`` is the server's Date header."""

    lease_expires_at: datetime | None
    cancel_requested: bool
    date: datetime | None = None


@dataclass
class LeaseResult:
    """One lease of a batch heartbeat: extended (``lease_expires_at``, with
    ``cancel_requested``), or refused with ``error`` (``lease_lost``); ``date`` is
    the answer's Date header."""

    task_id: str
    lease_expires_at: datetime | None = None
    cancel_requested: bool = False
    error: str | None = None
    date: datetime | None = None


@dataclass
class WorkerInfo:
    """A worker the server has seen (``GET /workers``)."""

    id: str
    queues: list[str] = field(default_factory=list)
    last_heartbeat_at: datetime | None = None
    current_tasks: list[str] = field(default_factory=list)
    stale: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WorkerInfo:
        return _build(cls, d)
