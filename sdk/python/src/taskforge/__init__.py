"""TaskForge for Python: a producer client for the HTTP API and a worker runtime.

>>> import taskforge
>>> c = taskforge.Client("http://127.0.0.1:8080")
>>> task = c.enqueue("emails", {"to": "ada@example.com"})

Standard library only. See docs/sdk.md ("Python") for the whole story.
"""

from .client import MAX_WAIT_MS, UNSET, Client
from .errors import (
    APIError,
    Conflict,
    Forbidden,
    GroupNotFound,
    IdempotencyConflict,
    DuplicateRequest,
    Internal,
    InvalidRequest,
    LeaseExpired,
    LeaseLost,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermanentError,
    QueueExists,
    QueueNotEmpty,
    QueueNotFound,
    RateLimited,
    RetryableError,
    ScheduleExists,
    ScheduleNotFound,
    Snooze,
    StopReason,
    TaskCancelled,
    TaskForgeError,
    TaskNotCancellable,
    TaskNotFound,
    TaskTimedOut,
    Unauthorized,
    Unavailable,
    WorkerStopping,
)
from .types import (
    TERMINAL,
    AckResult,
    Attempt,
    BulkCancel,
    Group,
    GroupLimits,
    GroupPage,
    LeaseResult,
    LeaseState,
    NewTask,
    PolledTask,
    PollResult,
    Queue,
    Retention,
    Schedule,
    Stats,
    Task,
    TaskPage,
    WorkerInfo,
)
from .worker import DEFAULT_PREFETCH_BELOW, Handler, Job, Worker

__version__ = "0.1.0"

__all__ = [
    "Client", "UNSET", "MAX_WAIT_MS", "Worker", "Job", "Handler", "DEFAULT_PREFETCH_BELOW",
    "Queue", "Retention", "Group", "GroupLimits", "GroupPage", "Task", "Attempt", "TaskPage", "Stats", "BulkCancel", "Schedule", "NewTask", "PolledTask",
    "PollResult", "AckResult", "LeaseState", "LeaseResult", "WorkerInfo", "TERMINAL",
    "TaskForgeError", "APIError", "InvalidRequest", "Unauthorized", "Forbidden", "NotFound", "QueueNotFound",
    "GroupNotFound", "TaskNotFound", "ScheduleNotFound", "MethodNotAllowed", "Conflict", "QueueExists", "QueueNotEmpty",
    "ScheduleExists", "TaskNotCancellable", "IdempotencyConflict", "DuplicateRequest", "LeaseLost", "PayloadTooLarge", "RateLimited",
    "Internal", "Unavailable", "RetryableError", "PermanentError", "Snooze", "StopReason", "TaskCancelled",
    "LeaseExpired", "TaskTimedOut", "WorkerStopping",
]
