/**
 * Errors of the TaskForge client and worker runtime.
 *
 * Every API error response becomes a {@link TaskForgeError} carrying the API's
 * error code and HTTP status; a request that got no answer at all becomes one with
 * code `unavailable` and status 0. Handler outcomes other than success are thrown
 * as {@link PermanentError}, {@link RetryableError} or {@link SnoozeError}; the
 * reasons a handler's `AbortSignal` fires are the `…Error` classes at the end.
 */

/** The error codes of the TaskForge API (docs/api.md); other strings may appear. */
export type ErrorCode =
  | "invalid_request"
  | "unauthorized"
  | "forbidden"
  | "cross_origin_request"
  | "queue_not_found"
  | "task_not_found"
  | "schedule_not_found"
  | "group_not_found"
  | "token_not_found"
  | "not_found"
  | "method_not_allowed"
  | "queue_exists"
  | "queue_not_empty"
  | "schedule_exists"
  | "task_not_cancellable"
  | "idempotency_conflict"
  | "duplicate_request"
  | "lease_lost"
  | "last_admin_token"
  | "payload_too_large"
  | "rate_limited"
  | "internal"
  | "unavailable"
  | (string & {});

/**
 * An error answer of the TaskForge API (`{"error": {"code", "message"}}` with its
 * HTTP status), or a request that got no answer (`code` "unavailable", `status`
 * 0, the network error as `cause`). `message` reads "<what was done>: <code>:
 * <server's message>".
 */
export class TaskForgeError extends Error {
  override readonly name = "TaskForgeError";
  /** The HTTP status; 0 when the server could not be reached. */
  readonly status: number;
  /** The API's snake_case error code, e.g. "queue_not_found". */
  readonly code: ErrorCode;
  /** The server's human-readable detail. */
  readonly detail: string;
  /** From a 429's Retry-After header: when to try again, in ms; undefined otherwise. */
  readonly retryAfterMs: number | undefined;
  /**
   * The error's `task_id` field: of a `duplicate_request`, the task that held the
   * idempotency key (gone, its key still reserved by the queue's window); undefined otherwise.
   */
  readonly taskId: string | undefined;

  constructor(
    what: string,
    status: number,
    code: ErrorCode,
    detail: string,
    options?: { cause?: unknown; retryAfterMs?: number | undefined; taskId?: string | undefined },
  ) {
    super(`${what}: ${code}: ${detail}`, options?.cause === undefined ? undefined : { cause: options.cause });
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.retryAfterMs = options?.retryAfterMs;
    this.taskId = options?.taskId;
  }

  /**
   * True when the same request may succeed later: the server was unreachable or
   * unavailable (502, 503, 504), failed internally (500), or rate-limited the caller (429).
   */
  get temporary(): boolean {
    return this.code === "unavailable" || this.code === "internal" || this.code === "rate_limited" ||
      this.status === 500 || this.status === 502 || this.status === 503 || this.status === 504;
  }
}

/** True when err is a {@link TaskForgeError} with that code. */
export function isErrorCode(err: unknown, code: ErrorCode): err is TaskForgeError {
  return err instanceof TaskForgeError && err.code === code;
}

/** The code of an error answer that had no JSON error body (a proxy's page, say). */
export function codeForStatus(status: number): ErrorCode {
  if (status === 502 || status === 503 || status === 504) return "unavailable";
  if (status === 404) return "not_found";
  if (status === 413) return "payload_too_large";
  if (status === 429) return "rate_limited";
  if (status >= 500) return "internal";
  return `http_${status}`;
}

/**
 * A handler failure not worth retrying: the worker nacks the task with
 * `retryable: false`, so it is dead-lettered at once. Wrap an error with
 * `new PermanentError(err)` or give a message.
 */
export class PermanentError extends Error {
  override readonly name = "PermanentError";
  constructor(reason: unknown, options?: { cause?: unknown }) {
    super(messageOf(reason), { cause: options?.cause ?? (reason instanceof Error ? reason : undefined) });
  }
}

/**
 * A handler failure to retry after `retryAfterMs` instead of the queue's backoff
 * (the nack's `retry_after_ms`). Without `retryAfterMs` it is an ordinary
 * retryable failure. Every retry spends one of the task's budget.
 */
export class RetryableError extends Error {
  override readonly name = "RetryableError";
  /** The delay before the next attempt, in ms; undefined = the queue's backoff. */
  readonly retryAfterMs: number | undefined;
  constructor(reason: unknown, options?: { retryAfterMs?: number; cause?: unknown }) {
    super(messageOf(reason), { cause: options?.cause ?? (reason instanceof Error ? reason : undefined) });
    this.retryAfterMs = options?.retryAfterMs === undefined ? undefined : Math.max(0, Math.floor(options.retryAfterMs));
  }
}

/** The longest snooze, in ms: the server's limit for `delay_ms` (24 h). */
export const MAX_SNOOZE_MS = 24 * 60 * 60 * 1000;

/**
 * Not a failure: the task cannot run yet. Thrown from a handler, the worker
 * releases the task with `delay_ms` (clamped to 0..{@link MAX_SNOOZE_MS}): the
 * attempt is recorded `released`, no retry is spent, and the task is due again
 * `delayMs` from now.
 */
export class SnoozeError extends Error {
  override readonly name = "SnoozeError";
  /** How long until the task is due again, in ms. */
  readonly delayMs: number;
  constructor(delayMs: number) {
    const d = Math.min(Math.max(Math.floor(delayMs) || 0, 0), MAX_SNOOZE_MS);
    super(`snoozed for ${d} ms`);
    this.delayMs = d;
  }
}

/** Marks err as permanent: see {@link PermanentError}. */
export function permanent(err: unknown): PermanentError {
  return err instanceof PermanentError ? err : new PermanentError(err);
}

/** Marks err as retryable after ms: see {@link RetryableError}. */
export function retryAfter(err: unknown, ms: number): RetryableError {
  return new RetryableError(err, { retryAfterMs: ms });
}

/** A snooze of ms: see {@link SnoozeError}. Throw it from a handler. */
export function snooze(ms: number): SnoozeError {
  return new SnoozeError(ms);
}

/** The reason of a handler's signal when a heartbeat reported `cancel_requested`. */
export class TaskCancelledError extends Error {
  override readonly name = "TaskCancelledError";
  constructor(taskId: string) {
    super(`task ${taskId} cancelled`);
  }
}

/**
 * The reason of a handler's signal when the worker no longer holds the task's
 * lease (a heartbeat got 409 `lease_lost`, or heartbeats failed past the lease's
 * expiry): the task may run elsewhere, and this worker reports nothing for it.
 */
export class LeaseLostError extends Error {
  override readonly name = "LeaseLostError";
  constructor(taskId: string, options?: { cause?: unknown }) {
    super(`lease of task ${taskId} lost`, options);
  }
}

/**
 * The reason of a handler's signal when the worker stopped and its grace period
 * ended: the task is handed back (released) for another worker.
 */
export class WorkerStoppingError extends Error {
  override readonly name = "WorkerStoppingError";
  constructor(workerId: string) {
    super(`worker ${workerId} stopping`);
  }
}

/** The reason of a handler's signal when the task's `timeout_seconds` passed. */
export class TaskTimeoutError extends Error {
  override readonly name = "TaskTimeoutError";
  constructor(taskId: string, timeoutSeconds: number) {
    super(`task ${taskId}: timeout of ${timeoutSeconds} s exceeded`);
  }
}

/** The message of any thrown value. */
export function messageOf(v: unknown): string {
  if (v instanceof Error) return v.message;
  if (typeof v === "string") return v;
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}
