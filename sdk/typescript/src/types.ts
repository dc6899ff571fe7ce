/**
 * The TaskForge API's objects, with the field names the API uses (docs/api.md).
 * Times are RFC 3339 strings in UTC; JSON values (payloads, results, progress) are
 * parsed as they came.
 */

/** A task's status. */
export type TaskStatus = "pending" | "claimed" | "executing" | "retry" | "done" | "dead" | "cancelled" | "blocked";

/** An attempt's outcome. */
export type AttemptStatus = "executing" | "succeeded" | "failed" | "abandoned" | "timed_out" | "cancelled" | "released";

/** True for the statuses a task never leaves: done, dead, cancelled. */
export function isTerminal(status: TaskStatus | string): boolean {
  return status === "done" || status === "dead" || status === "cancelled";
}

/** The most tasks one batch enqueue, bulk cancel, bulk replay or bulk discard may name. */
export const MAX_BATCH = 1000;

/** A queue (GET /queues/:name). `rate_burst` shows its effective value. */
export interface Queue {
  name: string;
  max_retries: number;
  /** Tasks per second; null = unlimited. */
  rate_limit: number | null;
  rate_burst: number | null;
  /** Executing tasks at once; null = unlimited. */
  max_concurrency: number | null;
  backoff_base_ms: number;
  backoff_max_ms: number;
  paused: boolean;
  /** Each priority level is worth this much waiting; null = strict priority. */
  priority_aging_ms: number | null;
  /** How long finished tasks are kept, the server's defaults filled in. */
  retention: Retention;
  /** How long an idempotency key stays reserved after its task's creation, even once the task is deleted. */
  idempotency_window_ms: number;
  /** "round_robin" when the queue's groups take turns; null = one line. */
  fairness: "round_robin" | null;
  /** The defaults of each group (null = unlimited); a group's overrides win. */
  group_max_concurrency: number | null;
  group_rate_limit: number | null;
  group_rate_burst: number | null;
  created_at: string;
  updated_at: string;
}

/**
 * The settings of POST /queues and PATCH /queues/:name. An absent field takes the
 * default (on create) or stays as it is (on update); null clears an optional limit.
 */
export interface QueueSettings {
  max_retries?: number;
  rate_limit?: number | null;
  rate_burst?: number | null;
  max_concurrency?: number | null;
  backoff_base_ms?: number;
  backoff_max_ms?: number;
  paused?: boolean;
  priority_aging_ms?: number | null;
  /**
   * Sets the retention ages given and keeps the others (on create: the server's
   * defaults, done and cancelled `--retention`, dead forever); null puts every age
   * back to the server's default.
   */
  retention?: RetentionSettings | null;
  /** 0..2,592,000,000 (30 days; default 24 h): see Queue.idempotency_window_ms. */
  idempotency_window_ms?: number;
  /** "round_robin": the queue's groups take weighted turns; null = one line. */
  fairness?: "round_robin" | null;
  group_max_concurrency?: number | null;
  group_rate_limit?: number | null;
  group_rate_burst?: number | null;
}

/**
 * How long a queue keeps its tasks after they finish, per final status, in
 * milliseconds; null = forever.
 */
export interface Retention {
  done_ms: number | null;
  cancelled_ms: number | null;
  dead_ms: number | null;
}

/** The retention ages a QueueSettings sets: at least 60000 ms, or null = forever. */
export type RetentionSettings = Partial<Retention>;

/** An attempt record of a task's `attempt_history`. */
export interface Attempt {
  attempt: number;
  worker_id: string;
  status: AttemptStatus;
  started_at: string;
  finished_at: string | null;
  error: string | null;
}

/** A task. `attempt_history` comes with GET of one task only, `died_at` with DLQ lists only. */
export interface Task {
  id: string;
  queue: string;
  payload: unknown;
  priority: number;
  status: TaskStatus;
  scheduled_at: string;
  attempts: number;
  max_retries: number;
  timeout_seconds: number | null;
  idempotency_key: string | null;
  last_error: string | null;
  result: unknown;
  claimed_by: string | null;
  heartbeat_at: string | null;
  lease_expires_at: string | null;
  cancel_requested: boolean;
  replayed_from: string | null;
  replay_count: number;
  replayed_at: string | null;
  /** Attempts that ended `released`; they do not spend the retry budget. */
  releases: number;
  created_at: string;
  updated_at: string;
  finished_at: string | null;
  /** The last progress a worker reported for the current or last attempt. */
  progress: unknown;
  /** The schedule whose tick created the task; null when enqueued directly. */
  schedule: string | null;
  /** The debounce key the task was enqueued with; null for none. */
  debounce_key: string | null;
  /** How many later enqueues with its debounce key replaced the task while it waited. */
  debounced: number;
  /** The task's group in a fair queue; null = the queue's unnamed group. */
  group: string | null;
  died_at?: string;
  attempt_history?: Attempt[];
}

/** The body of an enqueue (POST /queues/:name/tasks). */
export interface NewTask {
  /** Any JSON value, null included. */
  payload: unknown;
  /** 1 = highest … 10 = lowest; default 5. */
  priority?: number;
  /** RFC 3339 (a Date is converted): not delivered before it. */
  scheduled_at?: string | Date;
  max_retries?: number;
  /** 1..604,800: bounds one attempt from its start. */
  timeout_seconds?: number;
  /** 1..255 characters: the same key with the same request returns the same task. */
  idempotency_key?: string;
  /**
   * 1..255 characters: while the queue's task with this key is pending, never
   * attempted and not yet due, the enqueue replaces it (same id; this payload,
   * priority, budget and timeout; due `debounce_ms` from now, never past its first
   * enqueue + `debounce_max_ms`; `debounced` + 1); otherwise it creates a task due
   * `debounce_ms` from now. Excludes `idempotency_key` and `scheduled_at`.
   */
  debounce_key?: string;
  /** 1..86,400,000: the quiet period in ms; required with `debounce_key`. */
  debounce_ms?: number;
  /** ≥ `debounce_ms` (≤ 30 days): the longest a task waits from its first enqueue, in ms. */
  debounce_max_ms?: number;
  /** The task's group in a fair queue: 1..200 of A-Z a-z 0-9 . _ : @ -; absent or null = the unnamed group. */
  group?: string | null;
}

/** One page of a task listing; `next_cursor` is null on the last page. */
export interface TaskPage {
  tasks: Task[];
  next_cursor: string | null;
}

/** The filter of GET /queues/:name/tasks. */
export interface TaskFilter {
  status?: TaskStatus;
  /** The worker that last claimed the task. */
  worker_id?: string;
  created_after?: string | Date;
  created_before?: string | Date;
  /** Only the tasks of this group of a fair queue. */
  group?: string;
  /** 1..500, default 100. */
  limit?: number;
  cursor?: string;
}

/**
 * A group's overrides of its queue's group defaults: the body of PUT
 * /queues/:name/groups/:group. An absent or null setting takes the queue's default
 * (`group_max_concurrency`, `group_rate_limit`, `group_rate_burst`; weight 1).
 */
export interface GroupSettings {
  /** Turns per round, 1..1000. */
  weight?: number | null;
  /** The group's executing tasks at once, 1..1,000,000. */
  max_concurrency?: number | null;
  /** The group's tasks handed out per second, 0.000001..1,000,000. */
  rate_limit?: number | null;
  /** The group's token bucket size, 1..1,000,000 (default: ceil of the rate in effect). */
  rate_burst?: number | null;
}

/** The settings in effect for a group: its overrides, else its queue's defaults; null = unlimited. */
export interface GroupLimits {
  weight: number;
  max_concurrency: number | null;
  rate_limit: number | null;
  rate_burst: number | null;
}

/**
 * A group of a fair queue (GET /queues/:name/groups/:group): its overrides (null =
 * the queue's default), the settings in effect, and its tasks by status (exact).
 */
export interface Group {
  group: string;
  weight: number | null;
  max_concurrency: number | null;
  rate_limit: number | null;
  rate_burst: number | null;
  effective: GroupLimits;
  pending: number;
  blocked: number;
  /** Dispatched into the buffer, not yet taken by a worker. */
  claimed: number;
  executing: number;
  retry: number;
  dead: number;
}

/** One page of a group listing, by group name; `next_cursor` is null on the last page. */
export interface GroupPage {
  groups: Group[];
  next_cursor: string | null;
}

/** The filter of GET /queues/:name/groups. */
export interface GroupFilter {
  /** Only the groups with pending, claimed or executing tasks. */
  active?: boolean;
  /** 1..500, default 100. */
  limit?: number;
  cursor?: string;
}

/** The answer to a bulk cancel. */
export interface BulkCancel {
  /** Tasks that ended cancelled. */
  cancelled: number;
  /** Executing tasks that gained cancel_requested (they stop at their next heartbeat). */
  cancel_requested: number;
}

/** A queue's statistics (GET /queues/:name/stats). */
export interface Stats {
  queue: string;
  depth: Record<TaskStatus, number>;
  throughput_per_sec: number;
  error_rate: number;
  oldest_pending_age_seconds: number;
  dlq_depth: number;
}

/** A cron schedule (docs/schedules.md). */
export interface Schedule {
  name: string;
  queue: string;
  cron: string;
  timezone: string;
  payload: unknown;
  priority: number;
  max_retries: number | null;
  timeout_seconds: number | null;
  paused: boolean;
  next_run_at: string | null;
  last_run_at: string | null;
  last_task_id: string | null;
  created_at: string;
  updated_at: string;
}

/**
 * The settings of POST /schedules and PATCH /schedules/:name: `queue`, `cron` and
 * `payload` are required on create; an absent field takes the default or stays
 * as it is; null clears `max_retries` (the queue's) and `timeout_seconds` (none).
 */
export interface ScheduleSettings {
  queue?: string;
  cron?: string;
  timezone?: string;
  payload?: unknown;
  priority?: number;
  max_retries?: number | null;
  timeout_seconds?: number | null;
  paused?: boolean;
}

/** A worker as the server last saw it (GET /workers). */
export interface WorkerInfo {
  id: string;
  queues: string[];
  last_heartbeat_at: string;
  current_tasks: string[];
  stale: boolean;
}

/** A task a poll handed to a worker, under a lease. */
export interface PolledTask {
  id: string;
  queue: string;
  payload: unknown;
  priority: number;
  /** 1-based; a monotonic fencing token for the worker's own side effects. */
  attempt: number;
  lease_token: string;
  lease_expires_at: string;
  heartbeat_interval_ms: number;
  timeout_seconds: number | null;
  traceparent: string | null;
  /** The task's group; null = the queue's unnamed group. */
  group?: string | null;
}

/** One ack of a batch, or carried by a poll. */
export interface AckItem {
  task_id: string;
  lease_token: string;
  /** Any JSON value; absent = no result. */
  result?: unknown;
}

/** The outcome of one ack of a batch: the task when acked, an error (lease_lost) when refused. */
export interface AckResult {
  task_id: string;
  task?: Task;
  error?: { code: string; message: string };
}

/** The outcome of one ack of a minimal batch (`Client.ackBatchMinimal`): `{task_id}` when acked, `{task_id, error}` (lease_lost) when refused. */
export type MinimalAckResult = Omit<AckResult, "task">;

/** The body of POST /workers/poll (see docs/api.md, Worker protocol). */
export interface PollRequest {
  worker_id: string;
  /** 1..50 names, tried in order. */
  queues: string[];
  /** 1..100; default 1. */
  max_tasks?: number;
  /** 0..30,000: how long the server may wait for the first task. */
  wait_ms?: number;
  /** All the tasks are prefetch (as prefetch_tasks = max_tasks): capped queues are skipped. */
  prefetch?: boolean;
  /**
   * 0..max_tasks: how many of the tasks the worker will hold until a slot frees. The
   * first max_tasks - prefetch_tasks fill free slots from any queue; the rest come only
   * from queues without max_concurrency or group_max_concurrency.
   */
  prefetch_tasks?: number;
  /** Up to 100 acks committed before the claim; a poll carrying acks does not wait. */
  acks?: AckItem[];
}

/** The answer to a poll. */
export interface PollResult {
  tasks: PolledTask[];
  /** On an empty answer: when a rate-limited queue holding work has its next token. */
  retry_after_ms?: number;
  /** The outcomes of the poll's acks, in order. */
  acks?: AckResult[];
}

/** A lease after a heartbeat. */
export interface LeaseState {
  lease_expires_at: string | null;
  /** The task was cancelled: stop, and nack or release it. */
  cancel_requested: boolean;
}

/** The body of POST /workers/nack. */
export interface NackRequest {
  worker_id: string;
  task_id: string;
  lease_token: string;
  /** ≤ 64 KiB; recorded on the attempt and as last_error. */
  error: string;
  /** false dead-letters the task now; default true. */
  retryable?: boolean;
  /** Replaces the queue's backoff. */
  retry_after_ms?: number;
}

/** The body of POST /workers/release. */
export interface ReleaseRequest {
  worker_id: string;
  task_id: string;
  lease_token: string;
  reason?: string;
  /** 0..86,400,000: a snooze; absent keeps the task's place in line. */
  delay_ms?: number;
}
