import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { TaskForgeError, codeForStatus } from "./errors.js";
import {
  isTerminal,
  type AckItem,
  type AckResult,
  type BulkCancel,
  type Group,
  type GroupFilter,
  type GroupPage,
  type GroupSettings,
  type LeaseState,
  type MinimalAckResult,
  type NackRequest,
  type NewTask,
  type PollRequest,
  type PollResult,
  type Queue,
  type QueueSettings,
  type ReleaseRequest,
  type Schedule,
  type ScheduleSettings,
  type Stats,
  type Task,
  type TaskFilter,
  type TaskPage,
  type WorkerInfo,
} from "./types.js";

/** Where a TaskForge server listens by default. */
export const DEFAULT_URL = "http://127.0.0.1:8080";

/** The longest wait one GET ?wait_ms or poll may ask for, in ms. */
export const MAX_WAIT_MS = 30_000;

/** Options of a {@link Client}. */
export interface ClientOptions {
  /** An API token ("tf_…"), sent as `Authorization: Bearer`. Needed once the server has tokens. */
  token?: string;
  /**
   * The fetch to send requests with (for instrumentation or tests). Without it the
   * client sends them with node:http, over the global keep-alive agent: the built-in
   * fetch spent twice the CPU per request (its web streams and Request objects),
   * the largest cost of a worker whose handlers do little.
   */
  fetch?: typeof fetch;
}

/** Per-call options: an `AbortSignal` ends the call, which then throws the signal's reason. */
export interface CallOptions {
  signal?: AbortSignal;
}

/** An answer of the server, as the worker runtime needs it. */
export interface Answer<T> {
  body: T;
  status: number;
  /** The server's Date header in ms since the epoch; undefined when absent. */
  date: number | undefined;
}

/** The request header asking for an answer without task objects (RFC 7240; docs/api.md, Minimal answers). */
const PREFER_MINIMAL: Readonly<Record<string, string>> = { Prefer: "return=minimal" };

/** Error answers are read up to this many bytes. */
const MAX_ERROR_TEXT = 200;

/**
 * A client for one TaskForge server (or a load balancer in front of replicas),
 * covering the producer API (queues, tasks, the dead-letter queue, schedules) and
 * the worker protocol. Methods never retry on their own: a failed call throws a
 * {@link TaskForgeError}; the {@link Worker} runtime retries what is worth it.
 */
export class Client {
  /** The server's base URL, without a trailing slash. */
  readonly url: string;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch | undefined;

  /** A client for the server at baseUrl, e.g. "http://127.0.0.1:8080". */
  constructor(baseUrl: string = DEFAULT_URL, options: ClientOptions = {}) {
    let u: URL;
    try {
      u = new URL(baseUrl);
    } catch {
      throw new TypeError(`server URL ${JSON.stringify(baseUrl)}: want http://host:port or https://host:port`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || u.host === "") {
      throw new TypeError(`server URL ${JSON.stringify(baseUrl)}: want http://host:port or https://host:port`);
    }
    u.search = "";
    u.hash = "";
    this.url = u.toString().replace(/\/+$/, "");
    this.#token = options.token;
    this.#fetch = options.fetch;
  }

  /**
   * Sends one request and returns the decoded answer. An error answer throws a
   * {@link TaskForgeError}; no answer at all throws one with code "unavailable"
   * and status 0; an aborted signal throws its reason.
   */
  async request<T>(
    what: string,
    method: string,
    path: string,
    opts: { query?: Record<string, string | number | boolean | undefined>; body?: unknown; signal?: AbortSignal | undefined; headers?: Record<string, string> } = {},
  ): Promise<Answer<T>> {
    let target = this.url + path;
    if (opts.query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(opts.query)) if (v !== undefined) q.set(k, String(v));
      const s = q.toString();
      if (s) target += "?" + s;
    }
    const headers: Record<string, string> = { Accept: "application/json", ...opts.headers };
    if (opts.body !== undefined) headers["Content-Type"] = "application/json";
    if (this.#token) headers["Authorization"] = "Bearer " + this.#token;
    const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    let resp: Reply;
    let text: string;
    try {
      if (this.#fetch) {
        const init: RequestInit = { method, headers };
        if (payload !== undefined) init.body = payload;
        if (opts.signal) init.signal = opts.signal;
        const r = await this.#fetch(target, init);
        text = await r.text();
        resp = r;
      } else {
        [resp, text] = await send(target, method, headers, payload, opts.signal);
      }
    } catch (err) {
      if (opts.signal?.aborted) throw opts.signal.reason;
      throw new TaskForgeError(what, 0, "unavailable", `server unreachable: ${causeText(err)}`, { cause: err });
    }
    const dateHeader = resp.headers.get("date");
    const parsed = dateHeader ? Date.parse(dateHeader) : NaN;
    const date = Number.isNaN(parsed) ? undefined : parsed;
    if (resp.status >= 300) throw errorOf(what, resp, text);
    let body: T;
    try {
      body = (text === "" ? undefined : JSON.parse(text)) as T;
    } catch (err) {
      throw new TaskForgeError(what, resp.status, "invalid_response", `not JSON: ${causeText(err)}`, { cause: err });
    }
    return { body, status: resp.status, date };
  }

  async #call<T>(what: string, method: string, path: string, opts: { query?: Record<string, string | number | boolean | undefined>; body?: unknown; signal?: AbortSignal | undefined; headers?: Record<string, string> } = {}): Promise<T> {
    return (await this.request<T>(what, method, path, opts)).body;
  }

  // ---- Health ----

  /** Resolves while the server process answers (GET /healthz). */
  async healthz(o: CallOptions = {}): Promise<void> {
    await this.#call("healthz", "GET", "/healthz", { signal: o.signal });
  }

  /** Resolves when the server reaches PostgreSQL and Redis (GET /readyz); else throws "unavailable". */
  async readyz(o: CallOptions = {}): Promise<void> {
    await this.#call("readyz", "GET", "/readyz", { signal: o.signal });
  }

  // ---- Queues ----

  /** Creates a queue; throws `queue_exists` when the name is taken. */
  createQueue(name: string, settings: QueueSettings = {}, o: CallOptions = {}): Promise<Queue> {
    return this.#call(`create queue ${q(name)}`, "POST", "/queues", { body: { ...settings, name }, signal: o.signal });
  }

  /** Every queue, by name. */
  async listQueues(o: CallOptions = {}): Promise<Queue[]> {
    return (await this.#call<{ queues: Queue[] }>("list queues", "GET", "/queues", { signal: o.signal })).queues;
  }

  /** One queue; throws `queue_not_found`. */
  getQueue(name: string, o: CallOptions = {}): Promise<Queue> {
    return this.#call(`get queue ${q(name)}`, "GET", `/queues/${seg(name)}`, { signal: o.signal });
  }

  /** Changes the settings given (null clears a limit) and returns the queue as it is now. */
  updateQueue(name: string, settings: QueueSettings, o: CallOptions = {}): Promise<Queue> {
    return this.#call(`update queue ${q(name)}`, "PATCH", `/queues/${seg(name)}`, { body: settings, signal: o.signal });
  }

  /** Deletes the queue and its finished tasks; throws `queue_not_empty` while it holds unfinished or dead tasks. */
  async deleteQueue(name: string, o: CallOptions = {}): Promise<void> {
    await this.#call(`delete queue ${q(name)}`, "DELETE", `/queues/${seg(name)}`, { signal: o.signal });
  }

  /** Stops the queue from dispatching; executing tasks go on. */
  pauseQueue(name: string, o: CallOptions = {}): Promise<Queue> {
    return this.#call(`pause queue ${q(name)}`, "POST", `/queues/${seg(name)}/pause`, { signal: o.signal });
  }

  /** Lets a paused queue dispatch again. */
  resumeQueue(name: string, o: CallOptions = {}): Promise<Queue> {
    return this.#call(`resume queue ${q(name)}`, "POST", `/queues/${seg(name)}/resume`, { signal: o.signal });
  }

  /** The queue's depth by status, throughput, error rate, oldest pending age and DLQ depth. */
  stats(queue: string, o: CallOptions = {}): Promise<Stats> {
    return this.#call(`stats of queue ${q(queue)}`, "GET", `/queues/${seg(queue)}/stats`, { signal: o.signal });
  }

  // ---- Groups of a fair queue ----

  /**
   * Replaces a group's overrides of its queue's group defaults (absent or null
   * settings: the queue's default) and returns the group; every replica's next pop
   * applies them. Throws `queue_not_found`, or `invalid_request` for a bad group
   * name or setting.
   */
  putGroup(queue: string, group: string, settings: GroupSettings = {}, o: CallOptions = {}): Promise<Group> {
    return this.#call(`put group ${q(group)} of ${q(queue)}`, "PUT", groupPath(queue, group), { body: settings, signal: o.signal });
  }

  /** One group: its overrides, the settings in effect and its counts; throws `group_not_found` for a group with no tasks and no overrides. */
  getGroup(queue: string, group: string, o: CallOptions = {}): Promise<Group> {
    return this.#call(`get group ${q(group)} of ${q(queue)}`, "GET", groupPath(queue, group), { signal: o.signal });
  }

  /** Forgets a group's overrides; its tasks stay. */
  async deleteGroup(queue: string, group: string, o: CallOptions = {}): Promise<void> {
    await this.#call(`delete group ${q(group)} of ${q(queue)}`, "DELETE", groupPath(queue, group), { signal: o.signal });
  }

  /** One page of the queue's groups, by name (`active`: only those with pending, claimed or executing tasks). */
  listGroups(queue: string, filter: GroupFilter = {}, o: CallOptions = {}): Promise<GroupPage> {
    return this.#call(`list groups of ${q(queue)}`, "GET", `/queues/${seg(queue)}/groups`, {
      query: { active: filter.active ? true : undefined, limit: filter.limit, cursor: filter.cursor }, signal: o.signal,
    });
  }

  /** Every group matching filter, page after page, by name. */
  async *allGroups(queue: string, filter: GroupFilter = {}, o: CallOptions = {}): AsyncGenerator<Group, void, undefined> {
    let cursor = filter.cursor;
    do {
      const page = await this.listGroups(queue, { ...filter, ...(cursor ? { cursor } : {}) }, o);
      yield* page.groups;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  // ---- Tasks ----

  /**
   * Enqueues one task. With an idempotency key, the same request returns the
   * task it created before; a different one throws `idempotency_conflict`. With a
   * debounce key, it returns the waiting task it replaced (`debounced` > 0), or
   * the task it created.
   * `traceparent` (W3C trace context) joins the enqueue to the caller's trace.
   */
  enqueue(queue: string, task: NewTask, o: CallOptions & { traceparent?: string } = {}): Promise<Task> {
    return this.#call(`enqueue into ${q(queue)}`, "POST", `/queues/${seg(queue)}/tasks`, {
      body: taskBody(task), signal: o.signal, ...(o.traceparent ? { headers: { traceparent: o.traceparent } } : {}),
    });
  }

  /** Enqueues 1..1,000 tasks in one transaction, all or nothing; answers them in input order. */
  async enqueueBatch(queue: string, tasks: NewTask[], o: CallOptions & { traceparent?: string } = {}): Promise<Task[]> {
    const out = await this.#call<{ tasks: Task[] }>(`enqueue ${tasks.length} tasks into ${q(queue)}`, "POST", `/queues/${seg(queue)}/tasks/batch`, {
      body: { tasks: tasks.map(taskBody) }, signal: o.signal, ...(o.traceparent ? { headers: { traceparent: o.traceparent } } : {}),
    });
    return out.tasks;
  }

  /**
   * {@link enqueueBatch} for bulk loads: returns only the new tasks' ids, in input
   * order, and asks the server for nothing more (`Prefer: return=minimal`), so
   * that neither side encodes or decodes a task object per task. Throws
   * `invalid_response` when the server answers another number of ids.
   */
  async enqueueBatchMinimal(queue: string, tasks: NewTask[], o: CallOptions & { traceparent?: string } = {}): Promise<string[]> {
    const what = `enqueue ${tasks.length} tasks into ${q(queue)}`;
    const a = await this.request<{ tasks?: { id?: unknown }[] }>(what, "POST", `/queues/${seg(queue)}/tasks/batch`, {
      body: { tasks: tasks.map(taskBody) }, signal: o.signal, headers: { ...PREFER_MINIMAL, ...(o.traceparent ? { traceparent: o.traceparent } : {}) },
    });
    const got = a.body?.tasks;
    if (!Array.isArray(got) || got.length !== tasks.length) {
      throw new TaskForgeError(what, a.status, "invalid_response", `server answered ${Array.isArray(got) ? got.length : 0} ids for ${tasks.length} tasks`);
    }
    return got.map((t, i) => {
      if (typeof t?.id !== "string" || t.id === "") throw new TaskForgeError(what, a.status, "invalid_response", `server answered no id for tasks[${i}]`);
      return t.id;
    });
  }

  /**
   * One task with its `attempt_history`. With `waitMs` (at most 30,000) the
   * server answers as soon as the task is done, dead or cancelled, or when the
   * wait ends with the task as it is then: check `status`.
   */
  getTask(queue: string, id: string, o: CallOptions & { waitMs?: number } = {}): Promise<Task> {
    const query = o.waitMs !== undefined ? { wait_ms: Math.min(Math.max(Math.floor(o.waitMs), 0), MAX_WAIT_MS) } : undefined;
    return this.#call(`get task ${id}`, "GET", `/queues/${seg(queue)}/tasks/${seg(id)}`, { signal: o.signal, ...(query ? { query } : {}) });
  }

  /**
   * Waits, in rounds of at most 30 s, until the task is done, dead or cancelled,
   * and returns it; with `timeoutMs`, returns the task as last read once that has
   * passed (check `status` or {@link isTerminal}). An aborted signal throws its reason.
   */
  async waitTask(queue: string, id: string, o: CallOptions & { timeoutMs?: number } = {}): Promise<Task> {
    const end = o.timeoutMs === undefined ? Infinity : Date.now() + o.timeoutMs;
    for (;;) {
      const left = end - Date.now();
      const t = await this.getTask(queue, id, { waitMs: Math.min(Math.max(left, 0), MAX_WAIT_MS), ...(o.signal ? { signal: o.signal } : {}) });
      if (isTerminal(t.status) || Date.now() >= end) return t;
    }
  }

  /** One page of the queue's tasks, newest first. */
  listTasks(queue: string, filter: TaskFilter = {}, o: CallOptions = {}): Promise<TaskPage> {
    return this.#call(`list tasks of ${q(queue)}`, "GET", `/queues/${seg(queue)}/tasks`, { query: filterQuery(filter), signal: o.signal });
  }

  /** Every task matching filter, page after page, newest first. */
  async *allTasks(queue: string, filter: TaskFilter = {}, o: CallOptions = {}): AsyncGenerator<Task, void, undefined> {
    let cursor = filter.cursor;
    do {
      const page = await this.listTasks(queue, { ...filter, ...(cursor ? { cursor } : {}) }, o);
      yield* page.tasks;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  /**
   * Cancels a task: `cancelled` at once unless it is executing, when it gains
   * `cancel_requested` and stops at its worker's next heartbeat. Throws
   * `task_not_cancellable` for a finished task.
   */
  cancelTask(queue: string, id: string, o: CallOptions = {}): Promise<Task> {
    return this.#call(`cancel task ${id}`, "DELETE", `/queues/${seg(queue)}/tasks/${seg(id)}`, { signal: o.signal });
  }

  /** Cancels up to 1,000 tasks by id, in one transaction; finished or unknown ids are skipped. */
  cancelTasks(queue: string, ids: string[], o: CallOptions = {}): Promise<BulkCancel> {
    return this.#call(`cancel ${ids.length} tasks of ${q(queue)}`, "POST", `/queues/${seg(queue)}/tasks/cancel`, { body: { ids }, signal: o.signal });
  }

  /**
   * Cancels every task of the queue with that status (never executing ones). The
   * server works in batches: give a large queue a long-lived signal.
   */
  cancelByStatus(queue: string, status: "pending" | "retry" | "blocked", o: CallOptions = {}): Promise<BulkCancel> {
    return this.#call(`cancel ${status} tasks of ${q(queue)}`, "POST", `/queues/${seg(queue)}/tasks/cancel`, { body: { status }, signal: o.signal });
  }

  // ---- Dead-letter queue ----

  /** One page of dead tasks (with `died_at`), most recently died first. */
  listDead(queue: string, page: { limit?: number; cursor?: string } = {}, o: CallOptions = {}): Promise<TaskPage> {
    return this.#call(`list dead tasks of ${q(queue)}`, "GET", `/queues/${seg(queue)}/dlq`, { query: { limit: page.limit, cursor: page.cursor }, signal: o.signal });
  }

  /** Every dead task, page after page. */
  async *allDead(queue: string, pageSize?: number, o: CallOptions = {}): AsyncGenerator<Task, void, undefined> {
    let cursor: string | undefined;
    do {
      const page = await this.listDead(queue, { ...(pageSize ? { limit: pageSize } : {}), ...(cursor ? { cursor } : {}) }, o);
      yield* page.tasks;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  /** Replays a dead task as a new task (`replayed_from` = the dead id); the dead one stays. */
  replayDead(queue: string, id: string, o: CallOptions = {}): Promise<Task> {
    return this.#call(`replay dead task ${id}`, "POST", `/queues/${seg(queue)}/dlq/${seg(id)}/replay`, { signal: o.signal });
  }

  /** Replays up to 1,000 dead tasks, all or nothing; throws `task_not_found` when any id is not dead. */
  async replayDeadTasks(queue: string, ids: string[], o: CallOptions = {}): Promise<Task[]> {
    return (await this.#call<{ replayed: Task[] }>(`replay ${ids.length} dead tasks of ${q(queue)}`, "POST", `/queues/${seg(queue)}/dlq/replay`, { body: { ids }, signal: o.signal })).replayed;
  }

  /** Replays every dead task of the queue. */
  async replayAllDead(queue: string, o: CallOptions = {}): Promise<Task[]> {
    return (await this.#call<{ replayed: Task[] }>(`replay all dead tasks of ${q(queue)}`, "POST", `/queues/${seg(queue)}/dlq/replay`, { body: { all: true }, signal: o.signal })).replayed;
  }

  /** Deletes a dead task and its attempts for good. */
  async discardDead(queue: string, id: string, o: CallOptions = {}): Promise<void> {
    await this.#call(`discard dead task ${id}`, "DELETE", `/queues/${seg(queue)}/dlq/${seg(id)}`, { signal: o.signal });
  }

  /** Deletes up to 1,000 dead tasks (ids not dead are skipped); returns how many went. */
  async discardDeadTasks(queue: string, ids: string[], o: CallOptions = {}): Promise<number> {
    return (await this.#call<{ discarded: number }>(`discard ${ids.length} dead tasks of ${q(queue)}`, "DELETE", `/queues/${seg(queue)}/dlq`, { body: { ids }, signal: o.signal })).discarded;
  }

  /** Deletes every dead task of the queue; returns how many went. */
  async discardAllDead(queue: string, o: CallOptions = {}): Promise<number> {
    return (await this.#call<{ discarded: number }>(`discard all dead tasks of ${q(queue)}`, "DELETE", `/queues/${seg(queue)}/dlq`, { body: { all: true }, signal: o.signal })).discarded;
  }

  // ---- Schedules ----

  /** Creates a cron schedule; `queue`, `cron` and `payload` are required. */
  createSchedule(name: string, settings: ScheduleSettings, o: CallOptions = {}): Promise<Schedule> {
    return this.#call(`create schedule ${q(name)}`, "POST", "/schedules", { body: { ...settings, name }, signal: o.signal });
  }

  /** The schedules by name; only those of queue when given. */
  async listSchedules(queue?: string, o: CallOptions = {}): Promise<Schedule[]> {
    return (await this.#call<{ schedules: Schedule[] }>("list schedules", "GET", "/schedules", { query: { queue }, signal: o.signal })).schedules;
  }

  /** One schedule; throws `schedule_not_found`. */
  getSchedule(name: string, o: CallOptions = {}): Promise<Schedule> {
    return this.#call(`get schedule ${q(name)}`, "GET", `/schedules/${seg(name)}`, { signal: o.signal });
  }

  /** Changes the settings given (pause with `{paused: true}`). */
  updateSchedule(name: string, settings: ScheduleSettings, o: CallOptions = {}): Promise<Schedule> {
    return this.#call(`update schedule ${q(name)}`, "PATCH", `/schedules/${seg(name)}`, { body: settings, signal: o.signal });
  }

  /** Deletes a schedule; the tasks it created stay. */
  async deleteSchedule(name: string, o: CallOptions = {}): Promise<void> {
    await this.#call(`delete schedule ${q(name)}`, "DELETE", `/schedules/${seg(name)}`, { signal: o.signal });
  }

  /** Enqueues the schedule's task now; its next tick is unchanged. */
  triggerSchedule(name: string, o: CallOptions = {}): Promise<Task> {
    return this.#call(`trigger schedule ${q(name)}`, "POST", `/schedules/${seg(name)}/trigger`, { signal: o.signal });
  }

  // ---- Worker protocol (the Worker runtime uses these) ----

  /** Claims up to `max_tasks` tasks, waiting up to `wait_ms` for the first; carries acks when given. */
  async poll(r: PollRequest, o: CallOptions = {}): Promise<PollResult> {
    return (await this.pollAnswer(r, o)).body;
  }

  /** {@link poll} with the answer's status and Date header. */
  async pollAnswer(r: PollRequest, o: CallOptions = {}): Promise<Answer<PollResult>> {
    const a = await this.request<PollResult>(`poll ${JSON.stringify(r.queues)}`, "POST", "/workers/poll", { body: r, signal: o.signal });
    if (r.acks?.length && a.body.acks?.length !== r.acks.length) {
      throw new TaskForgeError(`poll ${JSON.stringify(r.queues)}`, a.status, "invalid_response",
        `server answered ${a.body.acks?.length ?? 0} ack results for ${r.acks.length} acks`);
    }
    return a;
  }

  /**
   * Extends the lease on a task; throws `lease_lost` without it. `progress`
   * (any JSON value, ≤ 4 KiB; null clears) replaces the task's progress.
   */
  async heartbeat(workerId: string, taskId: string, leaseToken: string, o: CallOptions & { progress?: unknown } = {}): Promise<LeaseState> {
    return (await this.heartbeatAnswer(workerId, taskId, leaseToken, o)).body;
  }

  /** {@link heartbeat} with the answer's status and Date header. */
  heartbeatAnswer(workerId: string, taskId: string, leaseToken: string, o: CallOptions & { progress?: unknown } = {}): Promise<Answer<LeaseState>> {
    const body: Record<string, unknown> = { worker_id: workerId, task_id: taskId, lease_token: leaseToken };
    if ("progress" in o) body["progress"] = o.progress === undefined ? null : o.progress;
    return this.request(`heartbeat task ${taskId}`, "POST", "/workers/heartbeat", { body, signal: o.signal });
  }

  /** Records the attempt as succeeded with an optional result; returns the task (done). */
  ack(workerId: string, taskId: string, leaseToken: string, result?: unknown, o: CallOptions = {}): Promise<Task> {
    const body: Record<string, unknown> = { worker_id: workerId, task_id: taskId, lease_token: leaseToken };
    if (result !== undefined) body["result"] = result;
    return this.#call(`ack task ${taskId}`, "POST", "/workers/ack", { body, signal: o.signal });
  }

  /**
   * Acks up to 100 tasks in one commit; each result has its task or its own
   * error (lease_lost). A throw means nothing was acked.
   */
  ackBatch(workerId: string, acks: AckItem[], o: CallOptions = {}): Promise<AckResult[]> {
    return this.#ackBatch(workerId, acks, o);
  }

  /**
   * {@link ackBatch} for a worker that does not need the done tasks back: each
   * result is `{task_id}` when acked, `{task_id, error}` (lease_lost) when
   * refused, and the server encodes no task (`Prefer: return=minimal`). The
   * {@link Worker} runtime's batched acks use it.
   */
  async ackBatchMinimal(workerId: string, acks: AckItem[], o: CallOptions = {}): Promise<MinimalAckResult[]> {
    const results = await this.#ackBatch(workerId, acks, o, PREFER_MINIMAL);
    // A server that ignores the preference still answers the tasks: leave them out.
    return results.map((r) => (r.error ? { task_id: r.task_id, error: r.error } : { task_id: r.task_id }));
  }

  async #ackBatch(workerId: string, acks: AckItem[], o: CallOptions, headers?: Record<string, string>): Promise<AckResult[]> {
    const what = `ack ${acks.length} tasks`;
    const a = await this.request<{ results: AckResult[] }>(what, "POST", "/workers/ack/batch", {
      body: { worker_id: workerId, acks }, signal: o.signal, ...(headers ? { headers } : {}),
    });
    if (a.body?.results?.length !== acks.length) {
      throw new TaskForgeError(what, a.status, "invalid_response", `server answered ${a.body?.results?.length ?? 0} ack results for ${acks.length} acks`);
    }
    return a.body.results;
  }

  /** Records the attempt as failed; returns the task (retry, dead, or cancelled). */
  nack(r: NackRequest, o: CallOptions = {}): Promise<Task> {
    return this.#call(`nack task ${r.task_id}`, "POST", "/workers/nack", { body: r, signal: o.signal });
  }

  /**
   * Hands a task back without spending its retry budget (the attempt ends
   * `released`); with `delay_ms`, a snooze. Returns the task (pending, or cancelled).
   */
  release(r: ReleaseRequest, o: CallOptions = {}): Promise<Task> {
    return this.#call(`release task ${r.task_id}`, "POST", "/workers/release", { body: r, signal: o.signal });
  }

  /** Every worker the server has seen. */
  async listWorkers(o: CallOptions = {}): Promise<WorkerInfo[]> {
    return (await this.#call<{ workers: WorkerInfo[] }>("list workers", "GET", "/workers", { signal: o.signal })).workers;
  }
}

/** The enqueue body of t, with Dates as RFC 3339. */
function taskBody(t: NewTask): NewTask {
  return t.scheduled_at instanceof Date ? { ...t, scheduled_at: t.scheduled_at.toISOString() } : t;
}

function filterQuery(f: TaskFilter): Record<string, string | number | undefined> {
  const iso = (v: string | Date | undefined) => (v instanceof Date ? v.toISOString() : v);
  return {
    status: f.status, worker_id: f.worker_id, group: f.group, created_after: iso(f.created_after),
    created_before: iso(f.created_before), limit: f.limit, cursor: f.cursor,
  };
}

/** A TaskForgeError for an error answer. */
/** What request reads of an answer: a fetch Response has it, and so does send's. */
interface Reply {
  readonly status: number;
  readonly statusText: string;
  readonly headers: { get(name: string): string | null };
}

/**
 * Sends one request with node:http (or node:https) and reads the whole answer as
 * text. It rejects when no answer arrives, or when signal aborts.
 */
function send(url: string, method: string, headers: Record<string, string>, body: string | undefined,
  signal: AbortSignal | undefined): Promise<[Reply, string]> {
  return new Promise((resolve, reject) => {
    const bytes = body === undefined ? undefined : new TextEncoder().encode(body);
    const h: Record<string, string | number> = { ...headers };
    if (bytes) h["Content-Length"] = bytes.length;
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    // The signal is watched here rather than passed to node:http, whose own watch
    // (an abort listener removed as the socket frees) cost more CPU per request.
    const onAbort = () => req.destroy(signal?.reason);
    const fail = (err: unknown) => {
      signal?.removeEventListener("abort", onAbort);
      reject(err);
    };
    const req = (url.startsWith("https:") ? httpsRequest : httpRequest)(url, { method, headers: h }, (res: IncomingMessage) => {
      let text = "";
      let ended = false;
      res.setEncoding("utf8");
      res.on("data", (chunk) => (text += chunk));
      res.on("error", fail);
      res.on("close", () => ended || fail(new Error("the answer was cut off")));
      res.on("end", () => {
        ended = true;
        signal?.removeEventListener("abort", onAbort);
        resolve([{
          status: res.statusCode ?? 0,
          statusText: res.statusMessage ?? "",
          headers: { get: (name) => { const v = res.headers[name.toLowerCase()]; return v === undefined ? null : String(v); } },
        }, text]);
      });
    });
    signal?.addEventListener("abort", onAbort, { once: true });
    req.on("error", fail);
    req.end(bytes);
  });
}

function errorOf(what: string, resp: Reply, text: string): TaskForgeError {
  const ra = resp.headers.get("retry-after");
  const retryAfterMs = ra !== null && /^\d+$/.test(ra.trim()) ? Number(ra) * 1000 : undefined;
  try {
    const e = JSON.parse(text) as { error?: { code?: unknown; message?: unknown; task_id?: unknown } };
    if (e && typeof e.error?.code === "string" && e.error.code !== "") {
      const taskId = typeof e.error.task_id === "string" && e.error.task_id !== "" ? e.error.task_id : undefined;
      return new TaskForgeError(what, resp.status, e.error.code, String(e.error.message ?? ""), { retryAfterMs, taskId });
    }
  } catch {
    // not a JSON error body: a proxy's page, say
  }
  let msg = text.trim();
  if (msg.length > MAX_ERROR_TEXT) msg = msg.slice(0, MAX_ERROR_TEXT) + "…";
  return new TaskForgeError(what, resp.status, codeForStatus(resp.status), msg || resp.statusText || `HTTP ${resp.status}`, { retryAfterMs });
}

function causeText(err: unknown): string {
  if (err instanceof Error) {
    const c = (err as { cause?: unknown }).cause;
    return c instanceof Error && c.message ? `${err.message} (${c.message})` : err.message;
  }
  return String(err);
}

/** The path of one group of a queue. */
function groupPath(queue: string, group: string): string {
  return `/queues/${seg(queue)}/groups/${seg(group)}`;
}

/** One path segment, escaped. */
function seg(s: string): string {
  return encodeURIComponent(s);
}

function q(name: string): string {
  return JSON.stringify(name);
}
