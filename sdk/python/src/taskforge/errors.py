"""Exceptions: API errors carrying the server's error code, and the ones a
handler raises (or sees) to steer the worker runtime."""

from __future__ import annotations

__all__ = [
    "TaskForgeError",
    "APIError",
    "InvalidRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "QueueNotFound",
    "GroupNotFound",
    "TaskNotFound",
    "ScheduleNotFound",
    "MethodNotAllowed",
    "Conflict",
    "QueueExists",
    "QueueNotEmpty",
    "ScheduleExists",
    "TaskNotCancellable",
    "IdempotencyConflict",
    "DuplicateRequest",
    "LeaseLost",
    "PayloadTooLarge",
    "RateLimited",
    "Internal",
    "Unavailable",
    "RetryableError",
    "PermanentError",
    "Snooze",
    "StopReason",
    "TaskCancelled",
    "LeaseExpired",
    "TaskTimedOut",
    "WorkerStopping",
    "error_for",
]


class TaskForgeError(Exception):
    """Base of every exception the SDK raises."""


class APIError(TaskForgeError):
    """An error answer of the API: ``{"error": {"code", "message"}}``.

    ``status`` is the HTTP status (0 when no answer arrived), ``code`` the API's
    error code (``queue_not_found``, ``lease_lost``, …) and ``message`` its text.
    Subclasses name the codes a caller branches on; codes without one (e.g.
    ``token_not_found``) come back as a plain APIError.
    """

    def __init__(self, status: int, code: str, message: str, *, retry_after: float | None = None,
                 task_id: str | None = None) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.status = status
        self.code = code
        self.message = message
        #: Seconds the server asked to wait (a ``Retry-After`` header), if any.
        self.retry_after = retry_after
        #: The error's ``task_id`` field, if any: the task that held the
        #: idempotency key of a :class:`DuplicateRequest`.
        self.task_id = task_id


class InvalidRequest(APIError):
    """400 ``invalid_request``: the request can never succeed as it is."""


class Unauthorized(APIError):
    """401 ``unauthorized``: no valid token."""


class Forbidden(APIError):
    """403 ``forbidden`` or ``cross_origin_request``."""


class NotFound(APIError):
    """404: no such route (``not_found``), or one of the subclasses."""


class QueueNotFound(NotFound):
    """404 ``queue_not_found``."""


class GroupNotFound(NotFound):
    """404 ``group_not_found``: a group with no tasks and no overrides."""


class TaskNotFound(NotFound):
    """404 ``task_not_found``."""


class ScheduleNotFound(NotFound):
    """404 ``schedule_not_found``."""


class MethodNotAllowed(APIError):
    """405 ``method_not_allowed``."""


class Conflict(APIError):
    """409: the request conflicts with the current state (see the subclasses)."""


class QueueExists(Conflict):
    """409 ``queue_exists``."""


class QueueNotEmpty(Conflict):
    """409 ``queue_not_empty``."""


class ScheduleExists(Conflict):
    """409 ``schedule_exists``."""


class TaskNotCancellable(Conflict):
    """409 ``task_not_cancellable``: the task has already finished."""


class IdempotencyConflict(Conflict):
    """409 ``idempotency_conflict``: the key was used with a different request."""


class DuplicateRequest(Conflict):
    """409 ``duplicate_request``: the key's task is gone, but the queue's
    ``idempotency_window_ms`` still holds the key. ``task_id`` names that task."""


class LeaseLost(Conflict):
    """409 ``lease_lost``: this worker no longer holds the task's lease."""


class PayloadTooLarge(APIError):
    """413 ``payload_too_large``."""


class RateLimited(APIError):
    """429 ``rate_limited``; ``retry_after`` says when to try again."""


class Internal(APIError):
    """500 ``internal``: a server bug."""


class Unavailable(APIError):
    """503 ``unavailable``, any 502/503/504, and a request that got no answer
    (connection refused or reset, timed out): worth retrying later."""


_BY_CODE: dict[str, type[APIError]] = {
    "invalid_request": InvalidRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "cross_origin_request": Forbidden,
    "not_found": NotFound,
    "queue_not_found": QueueNotFound,
    "task_not_found": TaskNotFound,
    "schedule_not_found": ScheduleNotFound,
    "group_not_found": GroupNotFound,
    "method_not_allowed": MethodNotAllowed,
    "queue_exists": QueueExists,
    "queue_not_empty": QueueNotEmpty,
    "schedule_exists": ScheduleExists,
    "task_not_cancellable": TaskNotCancellable,
    "idempotency_conflict": IdempotencyConflict,
    "duplicate_request": DuplicateRequest,
    "lease_lost": LeaseLost,
    "payload_too_large": PayloadTooLarge,
    "rate_limited": RateLimited,
    "internal": Internal,
    "unavailable": Unavailable,
}

_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    429: RateLimited,
    500: Internal,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def error_for(status: int, code: str, message: str, *, retry_after: float | None = None,
              task_id: str | None = None) -> APIError:
    """The exception for an error answer: by its code, else by its status."""
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or APIError
    if status in (502, 503, 504):
        cls = Unavailable
    return cls(status, code, message, retry_after=retry_after, task_id=task_id)


# --- raised by handlers --------------------------------------------------------


class RetryableError(TaskForgeError):
    """Raise from a handler to nack the task for a retry. With ``retry_after``
    (seconds) the retry comes that long from now instead of after the queue's
    backoff. Any other exception a handler raises is retried the same way, after
    the backoff."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        if retry_after is not None and retry_after < 0:
            raise ValueError("retry_after must not be negative")
        self.retry_after = retry_after


class PermanentError(TaskForgeError):
    """Raise from a handler when retrying cannot help (a bad payload): the task
    is nacked with ``retryable: false`` and goes to the dead-letter queue at once,
    whatever budget it has left."""


class Snooze(TaskForgeError):
    """Raise from a handler when the task cannot run yet: it is released with
    ``delay_ms`` and comes back ``delay`` seconds from now (0 to 24 h) without
    spending a retry, however often it is snoozed."""

    MAX_DELAY = 86_400.0

    def __init__(self, delay: float) -> None:
        self.delay = min(max(float(delay), 0.0), self.MAX_DELAY)
        super().__init__(f"snoozed for {self.delay:g}s")


# --- why a handler should stop (Job.stop_reason) ---------------------------------


class StopReason(TaskForgeError):
    """Why the runtime asks a handler to stop; ``Job.stop_reason`` holds one and
    ``Job.raise_if_stopping()`` raises it."""


class TaskCancelled(StopReason):
    """A heartbeat reported ``cancel_requested``: the task ends ``cancelled``."""


class LeaseExpired(StopReason):
    """The lease is gone (``lease_lost``, or heartbeats failed past its expiry):
    another worker may run the task; the runtime reports nothing for it."""


class TaskTimedOut(StopReason):
    """The task's ``timeout_seconds`` has passed since its claim."""


class WorkerStopping(StopReason):
    """The worker is shutting down and its grace period is over: the task is
    handed back (released, without spending a retry)."""
