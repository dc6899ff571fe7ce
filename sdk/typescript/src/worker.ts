import { hostname } from "node:os";
import { Client, MAX_WAIT_MS, type CallOptions } from "./client.js";
import {
  LeaseLostError,
  PermanentError,
  RetryableError,
  SnoozeError,
  TaskCancelledError,
  TaskForgeError,
  TaskTimeoutError,
  WorkerStoppingError,
  isErrorCode,
  messageOf,
} from "./errors.js";
import { MAX_POLLS_IN_FLIGHT, MAX_POLL_TASKS, PollRoom } from "./room.js";
import { Backoff, heartbeatInterval, isTimeout, sleep, withTimeout } from "./timers.js";
import type { AckItem, PollResult, PolledTask } from "./types.js";

/**
 * Runs one task. Its return value (when not undefined) is the task's result and
 * the task is acked; a throw nacks it: retried after the queue's backoff, unless
 * it is a {@link PermanentError} (dead-lettered now) or a {@link RetryableError}
 * with `retryAfterMs`; a {@link SnoozeError} releases it for later without spending
 * a retry. `job.signal` aborts when the handler should stop (see {@link Job.signal}).
 */
export type Handler = (job: Job) => unknown;

/** Receives the worker's warnings and errors. */
export interface Logger {
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** Options of a {@link Worker}; every one has a default. */
export interface WorkerOptions {
  /** Names the worker to the server (attempt history, GET /workers). Defaults to "<hostname>-<pid>-<random>". */
  id?: string;
  /** How many handlers run at once. Defaults to 10. */
  concurrency?: number;
  /**
   * How many tasks the worker may claim beyond its free slots while its handlers
   * run short (a recent average under `prefetchBelowMs`), so that when a handler
   * returns the next task is already at hand. A prefetched task is heartbeated
   * while it waits; its lease and timeout run from the claim. One poll asks for the
   * free slots and the prefetch room together (capped queues fill only free slots).
   * Defaults to `concurrency` (at most 100), and then adapts: while polls come back
   * full after the handlers ran out of tasks before their answer (handlers
   * outrunning polls), the room doubles, up to 200 tasks with the slots; it shrinks
   * by a quarter while tasks still wait when a poll comes back, and falls back to
   * the default when a poll comes back short. A value set is kept as is (at most
   * 100); 0 turns prefetching off.
   */
  prefetch?: number;
  /** The average handler duration under which the worker prefetches, in ms. Defaults to 250. */
  prefetchBelowMs?: number;
  /** How long one long poll may wait for work, in ms (at most 30,000). Defaults to 10,000. */
  pollWaitMs?: number;
  /**
   * How long `run`, once its signal aborts, waits for running handlers before
   * handing their tasks back, in ms. Defaults to 10,000; 0 hands them back at once.
   */
  shutdownGraceMs?: number;
  /** Bounds of the jittered exponential backoff after the server was unreachable or unavailable, in ms. Default 100 and 5,000. */
  retryMinMs?: number;
  retryMaxMs?: number;
  /** Defaults to one line per message on stderr. */
  logger?: Logger;
}

/** How long Run keeps trying to report tasks after the grace period, in ms. */
const FINAL_REPORT_MS = 5_000;
/** How long past its estimated expiry a lease is still assumed held, in ms. */
const LEASE_MARGIN_MS = 250;
/** A nack's error is cut to fit the server's 64 KiB limit. */
const MAX_ERROR_BYTES = 60 << 10;
/** The largest result a poll carries with its ack; larger ones go alone, so a refused result does not fail a poll. */
const MAX_POLL_ACK_RESULT = 16 << 10;
/** Each report (ack, nack, release) try is bounded by this, in ms. */
const REPORT_TIMEOUT_MS = 10_000;
/**
 * How long an ack waits for the next poll while a poll that may wait for work is
 * out, in ms: several polls' round trips when the queue has work, short beside a
 * lease (or the 30 s a poll may wait) when it has none. Then it goes alone.
 */
const POLL_ACK_HOLD_MS = 50;

/**
 * A task as its handler receives it. `payload` is the parsed JSON payload.
 */
export class Job {
  readonly id: string;
  readonly queue: string;
  readonly payload: unknown;
  readonly priority: number;
  /** The 1-based attempt number: a monotonic fencing token for the handler's side effects. */
  readonly attempt: number;
  /** The task's timeout_seconds (null when none); `signal` aborts then. */
  readonly timeoutSeconds: number | null;
  /** The id of the worker running the job. */
  readonly workerId: string;
  /** The W3C trace context of the enqueue, for the handler's span to continue; null when none. */
  readonly traceparent: string | null;
  /**
   * Aborts when the handler should stop; its `reason` says why: a
   * {@link TaskCancelledError} (a heartbeat reported cancel_requested; the task
   * ends cancelled), {@link LeaseLostError} (the task is no longer this worker's;
   * nothing is reported), {@link TaskTimeoutError} (timeout_seconds passed), or
   * {@link WorkerStoppingError} (the shutdown grace ended; the task is handed back).
   * It reaches the handler within one heartbeat interval.
   */
  get signal(): AbortSignal {
    return this.#signal();
  }
  readonly #signal: () => AbortSignal;
  readonly #report: (progress: unknown, o: CallOptions) => Promise<void>;

  /** @internal */
  constructor(t: PolledTask, workerId: string, signal: () => AbortSignal, report: (progress: unknown, o: CallOptions) => Promise<void>) {
    this.id = t.id;
    this.queue = t.queue;
    this.payload = t.payload;
    this.priority = t.priority;
    this.attempt = t.attempt;
    this.timeoutSeconds = t.timeout_seconds ?? null;
    this.workerId = workerId;
    this.traceparent = t.traceparent ?? null;
    this.#signal = signal;
    this.#report = report;
  }

  /**
   * Reports value (any JSON value of at most 4 KiB; null clears) as the attempt's
   * progress at once: a heartbeat that also extends the lease. The task shows it
   * until the next report, and after the attempt ends until the next one starts.
   * Throws a {@link LeaseLostError} when the lease is gone (the signal aborts too)
   * and a TaskForgeError `invalid_request` when the server refuses value. One
   * request per call: report at a human pace, not per item of a tight loop.
   */
  progress(value: unknown, o: CallOptions = {}): Promise<void> {
    return this.#report(value === undefined ? null : value, o);
  }
}

type JobState = "waiting" | "running" | "reporting";

/** A task held by a run of the worker. */
/**
 * Why a held task's handler is aborted when the server says its lease is gone: a
 * TaskTimeoutError once its timeout_seconds has run out (the server ends such an
 * attempt by itself, and its clock runs from the claim, slightly before this
 * worker's), a LeaseLostError otherwise.
 */
function lostReason(j: Held, cause: unknown): Error {
  if (j.timeoutAt !== 0 && Date.now() >= j.timeoutAt - LEASE_MARGIN_MS) {
    return new TaskTimeoutError(j.id, j.timeoutSeconds);
  }
  return new LeaseLostError(j.id, { cause });
}

class Held {
  readonly job: Job;
  readonly task: PolledTask;
  /**
   * The handler's AbortController, made only when job.signal is first read: most
   * handlers of short tasks never read it, and making a signal cost several µs of
   * CPU a task (a sixth of a Node worker's own CPU per no-op task). abort records why
   * the handler should stop either way.
   */
  #ac: AbortController | undefined;
  /** The handler should stop (see Job.signal), for reason. */
  aborted = false;
  reason: unknown = undefined;
  state: JobState = "waiting";
  /** Set by whoever reports the task: its handler's return, or the shutdown. */
  owned = false;
  /** The lease is known to be lost. */
  lost = false;
  /** Estimated lease length and local expiry (ms); 0 when unknown. */
  leaseLen = 0;
  deadline = 0;
  hbTimer: ReturnType<typeof setTimeout> | undefined;
  hbStopped = false;
  timeoutTimer: ReturnType<typeof setTimeout> | undefined;
  /** When timeout_seconds ends (ms since the epoch, from the poll's answer); 0: no timeout. */
  timeoutAt = 0;
  timeoutSeconds = 0;
  /** The result to ack with; undefined = none. */
  result: unknown = undefined;

  constructor(task: PolledTask, workerId: string, report: (j: Held, progress: unknown, o: CallOptions) => Promise<void>) {
    this.task = task;
    this.job = new Job(task, workerId, () => this.signal, (p, o) => report(this, p, o));
  }

  /** The signal job.signal hands the handler; aborted already when abort was called before. */
  get signal(): AbortSignal {
    if (this.#ac === undefined) {
      this.#ac = new AbortController();
      if (this.aborted) this.#ac.abort(this.reason);
    }
    return this.#ac.signal;
  }

  /** Tells the handler to stop, for reason; only the first call counts. */
  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.#ac?.abort(reason);
  }

  get id(): string {
    return this.task.id;
  }

  /** Takes in a lease confirmed by an answer received at recv (local ms), from the server's expiry and Date header. */
  extend(recv: number, expires: string | null | undefined, date: number | undefined): void {
    if (!expires || date === undefined) return;
    // Date is truncated to the second and recv follows the answer, so the estimate
    // errs late (by under a second plus the network delay): the worker never gives
    // up on a lease the server still honours.
    const len = parseTime(expires) - date;
    if (len > 0) {
      this.leaseLen = len;
      this.deadline = recv + len;
    }
  }

  /** Whether the lease has surely expired by now. */
  leaseExpired(now: number): boolean {
    return this.deadline !== 0 && now > this.deadline + LEASE_MARGIN_MS;
  }

  stopTimers(): void {
    this.hbStopped = true;
    clearTimeout(this.hbTimer);
    clearTimeout(this.timeoutTimer);
  }
}

/** The last time parseTime parsed, and its value: the tasks of one poll share their lease's expiry. */
let lastTime = "";
let lastParsed = NaN;

/** Date.parse(s), remembering the last string (Date.parse was a twentieth of a no-op worker's CPU). */
function parseTime(s: string): number {
  if (s !== lastTime) {
    lastParsed = Date.parse(s);
    lastTime = s;
  }
  return lastParsed;
}

/**
 * Runs handlers for the tasks of its queues: it long-polls for as many tasks as it
 * has free slots (and, while its handlers run short, for one more to have at hand),
 * heartbeats every task it holds, and acks, nacks or releases each when its handler
 * settles. Polls and reports that find the server unreachable or unavailable are
 * retried with jittered exponential backoff.
 */
export class Worker {
  readonly #client: Client;
  readonly #opts: Required<Omit<WorkerOptions, "logger">> & { logger: Logger };
  readonly #handlers = new Map<string, Handler>();
  #running = false;
  /** The prefetch was left to its default, so its room adapts. */
  readonly #autoPrefetch: boolean;

  constructor(client: Client, options: WorkerOptions = {}) {
    this.#client = client;
    this.#autoPrefetch = options.prefetch === undefined;
    const id = options.id || `${hostname() || "worker"}-${process.pid}-${Math.random().toString(16).slice(2, 8)}`;
    const nonNeg = (v: number | undefined, d: number) => (v === undefined || !Number.isFinite(v) || v < 0 ? d : v);
    const retryMinMs = nonNeg(options.retryMinMs, 100) || 100;
    const concurrency = Math.floor(nonNeg(options.concurrency, 10)) || 10;
    this.#opts = {
      id,
      concurrency,
      prefetch: Math.min(Math.floor(nonNeg(options.prefetch, concurrency)), MAX_POLL_TASKS),
      prefetchBelowMs: nonNeg(options.prefetchBelowMs, 250),
      pollWaitMs: Math.min(Math.floor(nonNeg(options.pollWaitMs, 10_000)), MAX_WAIT_MS),
      shutdownGraceMs: nonNeg(options.shutdownGraceMs, 10_000),
      retryMinMs,
      retryMaxMs: Math.max(nonNeg(options.retryMaxMs, 5_000) || 5_000, retryMinMs),
      logger: options.logger ?? stderrLogger(id),
    };
  }

  /** The worker's id. */
  get id(): string {
    return this.#opts.id;
  }

  /**
   * Registers handler for the tasks of queue. Queues are polled in the order they
   * were registered. Throws when queue already has a handler or the worker runs.
   */
  handle(queue: string, handler: Handler): this {
    if (typeof handler !== "function") throw new TypeError(`taskforge: handler for queue ${queue} is not a function`);
    if (this.#running) throw new Error("taskforge: handle called while the worker runs");
    if (this.#handlers.has(queue)) throw new Error(`taskforge: queue ${queue} already has a handler`);
    this.#handlers.set(queue, handler);
    return this;
  }

  /**
   * Polls and runs tasks until signal aborts, then shuts down gracefully: it stops
   * polling (an open long poll is abandoned; the server hands back what it claimed
   * for it; a poll carrying acks, which the server answers at once, is waited for),
   * sends the acks it held for the next poll, waits up to `shutdownGraceMs` for
   * running handlers (and prefetched tasks) to finish and be reported, then aborts
   * the handlers still running ({@link WorkerStoppingError}) and releases their
   * tasks and the prefetched ones not started, so another worker takes them at once.
   * A released attempt does not spend the task's retry budget. Resolves after every
   * ack is committed (its answer received) or its failure logged, and those
   * releases (at most about 5 s past the grace, even if the server is gone or a
   * handler ignores its signal);
   * rejects when no handler is registered, the worker already runs, or the server
   * rejects the poll as invalid.
   */
  async run(signal: AbortSignal): Promise<void> {
    if (this.#running) throw new Error("taskforge: worker is already running");
    if (this.#handlers.size === 0) throw new Error("taskforge: worker has no handlers; call handle first");
    this.#running = true;
    try {
      await new Run(this.#client, this.#opts, new Map(this.#handlers), this.#autoPrefetch).run(signal);
    } finally {
      this.#running = false;
    }
  }
}

/**
 * One run of a Worker. All its state lives on the one event loop: no locks, and
 * each transition of a held task reads top to bottom in one method.
 */
class Run {
  readonly #c: Client;
  readonly #o: Required<Omit<WorkerOptions, "logger">> & { logger: Logger };
  readonly #handlers: Map<string, Handler>;
  readonly #queues: string[];
  /** Carries heartbeats and reports; aborted only when the run gives up on them. */
  readonly #bg = new AbortController();

  readonly #active = new Set<Held>();
  #waiting: Held[] = [];
  #running = 0;
  #stopping = false;
  /** A handler returning while the poller is idle leaves its ack to the poll its freed slot sets off. */
  #pollerIdle = false;
  /** Polls carrying acks are out: they answer without waiting, so the next poll follows at once. */
  #ackPollsOut = 0;
  /** What the next poll asks for, how many are out, and the prefetch room. */
  readonly #room: PollRoom;
  /** Answers of polls out, not yet taken in by the poller. */
  #answers: Polled[] = [];
  /** The server refused prefetch_tasks (older than the field): free slots and prefetch room go in separate polls. */
  #oldServer = false;
  #holdTimer: ReturnType<typeof setTimeout> | undefined;
  #pollerGone = false;
  #pollAcks: Held[] = [];
  #ackQueue: Held[] = [];
  #ackSending = false;
  /** Wakes the poller when a slot frees (a one-element buffer, as a channel would be). */
  #slotSignalled = false;
  #wakePoller: (() => void) | undefined;
  /** Resolved when no task is held any more. */
  #idleWaiters: (() => void)[] = [];

  constructor(c: Client, o: Required<Omit<WorkerOptions, "logger">> & { logger: Logger }, handlers: Map<string, Handler>, autoPrefetch: boolean) {
    this.#c = c;
    this.#o = o;
    this.#room = new PollRoom(o.concurrency, o.prefetch, o.prefetchBelowMs, autoPrefetch);
    this.#handlers = handlers;
    this.#queues = [...handlers.keys()];
  }

  /**
   * The poller: it long-polls for as many tasks as the room allows, carrying the
   * acks left to it, and takes in what the polls claim, until stop aborts or the
   * server refuses the poll itself. Up to MAX_POLLS_IN_FLIGHT polls are out at
   * once; when it stops, it waits for those to be answered (an aborted poll fails
   * at once), then shuts down.
   */
  async run(stop: AbortSignal): Promise<void> {
    const b = new Backoff(this.#o.retryMinMs, this.#o.retryMaxMs);
    let fatal: unknown;
    // halt aborts with stop, or when the server refused the poll itself: the polls
    // out are abandoned either way.
    const halt = new AbortController();
    const onStop = () => halt.abort(stop.reason);
    if (stop.aborted) onStop();
    else stop.addEventListener("abort", onStop, { once: true });
    for (;;) {
      const a = this.#answers.shift();
      if (a !== undefined) {
        const f = await this.#settle(a, b, halt.signal);
        if (fatal === undefined && f !== undefined) {
          fatal = f;
          halt.abort(f);
        }
        continue;
      }
      if (halt.signal.aborted) {
        if (this.#room.inFlight === 0) break;
        await this.#woken(undefined);
        continue;
      }
      const p = this.#planPoll();
      if (p.go) {
        this.#sendPoll(p.free, p.prefetch, p.acks, halt.signal);
        continue;
      }
      this.#ackAlone(p.acks);
      await this.#woken(halt.signal);
    }
    stop.removeEventListener("abort", onStop);
    this.#pollerGone = true;
    this.#flushPollAcks();
    await this.#shutdown();
    if (fatal !== undefined) throw fatal;
  }

  /**
   * The next poll (go) and the acks it carries; or, when no poll goes now, the acks
   * to send alone, if any (others stay held for the next poll, within
   * POLL_ACK_HOLD_MS). Tasks whose handler returned but whose report is on its way
   * hold no slot.
   */
  #planPoll(): { go: boolean; free: number; prefetch: number; acks: Held[] } {
    const p = this.#room.plan(this.#running, this.#waiting.length);
    this.#pollerIdle = !p.go && this.#room.inFlight === 0 && !this.#room.deferred;
    if (p.go || p.acksAlone) {
      this.#stopHold();
      const acks = this.#pollAcks;
      this.#pollAcks = [];
      return { go: p.go, free: p.free, prefetch: p.prefetch, acks };
    }
    if (this.#pollAcks.length > 0 && this.#holdTimer === undefined) this.#holdTimer = setTimeout(() => this.#holdEnded(), POLL_ACK_HOLD_MS);
    return { go: false, free: 0, prefetch: 0, acks: [] };
  }

  /**
   * Sends a poll for the free slots and the prefetch room (against a server older
   * than prefetch_tasks, the free slots while there are any, else the prefetch
   * room), carrying acks; its answer joins #answers and wakes the poller.
   */
  #sendPoll(free: number, prefetch: number, acks: Held[], stop: AbortSignal): void {
    const want = free + prefetch;
    let asked = want;
    let shape: { prefetch?: boolean; prefetch_tasks?: number } = prefetch > 0 ? { prefetch_tasks: prefetch } : {};
    if (this.#oldServer) {
      asked = free > 0 ? free : prefetch;
      shape = free > 0 ? {} : { prefetch: true };
    }
    this.#room.sent(want);
    if (acks.length > 0) this.#ackPollsOut++;
    const sent = Date.now();
    // A stop abandons a poll waiting for work, not one carrying acks: the server
    // answers those at once, and an answer not read would leave the acks' fate
    // unknown (sent again, they may be refused as lost leases, and the tasks run
    // again). Such a poll ends only when the run gives up on its reports.
    const t = withTimeout(acks.length > 0 ? this.#bg.signal : stop, this.#o.pollWaitMs + REPORT_TIMEOUT_MS);
    const answered = (a: Polled) => {
      t.dispose();
      if (acks.length > 0) this.#ackPollsOut--;
      this.#answers.push(a);
      this.#signalSlot();
    };
    this.#c.pollAnswer({
      worker_id: this.#o.id, queues: this.#queues, max_tasks: asked, wait_ms: this.#o.pollWaitMs,
      ...shape, ...(acks.length ? { acks: ackItems(acks) } : {}),
    }, { signal: t.signal }).then(
      (r) => answered({ want, asked, shape, acks, sent, recv: Date.now(), res: r.body, date: r.date, err: undefined }),
      (e: unknown) => answered({ want, asked, shape, acks, sent, recv: Date.now(), res: undefined, date: undefined, err: e }),
    );
  }

  /**
   * Takes in a poll's answer: the acks it carried are settled, what it claimed
   * starts or waits for a slot. Returns the error when the server refused the poll
   * itself; a failure the worker can retry is waited out (backoff b), as is a rate
   * limit's hold.
   */
  async #settle(a: Polled, b: Backoff, stop: AbortSignal): Promise<unknown> {
    this.#settlePollAcks(a.acks, a.res);
    const res = a.res;
    if (!res) {
      this.#room.failed(a.want);
      const err = a.err;
      if (stop.aborted) return undefined;
      if (a.shape.prefetch_tasks !== undefined && isErrorCode(err, "invalid_request")) {
        // A server older than prefetch_tasks refuses the field (and acked nothing).
        if (!this.#oldServer) {
          this.#oldServer = true;
          this.#o.logger.warn("the server refused a poll with prefetch_tasks; polling as for an older server", { err: messageOf(err) });
        }
        return undefined;
      }
      if (isErrorCode(err, "invalid_request") || isErrorCode(err, "not_found") || isErrorCode(err, "method_not_allowed")) {
        return new Error(`taskforge worker ${this.#o.id}: ${messageOf(err)}`, { cause: err });
      }
      const d = b.next();
      this.#o.logger.warn("poll failed; retrying", { in_ms: Math.round(d), err: messageOf(err) });
      this.#flushPollAcks();
      await sleep(d, stop);
      return undefined;
    }
    b.reset();
    const tasks = res.tasks ?? [];
    this.#room.answered(a.want, tasks.length < a.asked, this.#waiting.length);
    for (const task of tasks) this.#start(task, a.recv, a.date);
    const retryAfterMs = res.retry_after_ms ?? 0;
    if (tasks.length === 0 && retryAfterMs > 0 && Date.now() - a.sent < this.#o.pollWaitMs / 2) {
      // A rate limit holds the work back and the server answered early: wait for
      // the next token rather than ask again at once.
      this.#flushPollAcks();
      await sleep(Math.min(retryAfterMs, this.#o.pollWaitMs), stop);
    }
    return undefined;
  }

  /**
   * The hold of acks ran out. While the poller waits for room worth a poll (and a
   * second poll may go), the acks go with a poll now, whatever its size; else alone.
   */
  #holdEnded(): void {
    this.#holdTimer = undefined;
    if (this.#room.deferred && this.#room.inFlight < MAX_POLLS_IN_FLIGHT && !this.#pollerGone) {
      this.#room.forcePoll = true;
      this.#signalSlot();
      return;
    }
    this.#flushPollAcks();
  }

  /** Resolves when a slot frees or a poll is answered (or either already has since the last wait), or stop aborts. */
  #woken(stop: AbortSignal | undefined): Promise<void> {
    if (this.#slotSignalled || stop?.aborted) {
      this.#slotSignalled = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        stop?.removeEventListener("abort", done);
        this.#wakePoller = undefined;
        this.#slotSignalled = false;
        resolve();
      };
      this.#wakePoller = done;
      stop?.addEventListener("abort", done, { once: true });
    });
  }

  #signalSlot(): void {
    if (this.#wakePoller) this.#wakePoller();
    else this.#slotSignalled = true;
  }

  /** Marks the jobs whose acks a poll carried done; when the poll failed (their fate unknown), acks them alone, with retries. */
  #settlePollAcks(jobs: Held[], res: PollResult | undefined): void {
    if (jobs.length === 0) return;
    if (!res) {
      this.#ackAlone(jobs);
      return;
    }
    jobs.forEach((j, i) => {
      const e = res.acks?.[i]?.error;
      if (e) this.#warnJob(j, "ack refused: the lease was lost, so another worker may run the task", { err: `${e.code}: ${e.message}` });
      this.#done(j);
    });
  }

  /** Sends the acks left to the next poll alone: no poll follows at once. */
  #flushPollAcks(): void {
    this.#stopHold();
    const left = this.#pollAcks;
    this.#pollAcks = [];
    this.#ackAlone(left);
  }

  #stopHold(): void {
    if (this.#holdTimer !== undefined) clearTimeout(this.#holdTimer);
    this.#holdTimer = undefined;
  }

  #ackAlone(jobs: Held[]): void {
    for (const j of jobs) this.#ack(j);
  }

  /** Heartbeats t and runs its handler, at once when a slot is free and otherwise (a prefetched task) when one frees up. */
  #start(t: PolledTask, recv: number, date: number | undefined): void {
    const j = new Held(t, this.#o.id, (held, p, o) => this.#reportProgress(held, p, o));
    j.extend(recv, t.lease_expires_at, date);
    if (t.timeout_seconds && t.timeout_seconds > 0) {
      // The server's deadline runs from the claim, so a prefetched task's does too.
      const secs = t.timeout_seconds;
      j.timeoutAt = recv + secs * 1000;
      j.timeoutSeconds = secs;
      j.timeoutTimer = setTimeout(() => j.abort(new TaskTimeoutError(t.id, secs)), Math.max(0, recv + secs * 1000 - Date.now()));
    }
    this.#active.add(j);
    this.#waiting.push(j);
    this.#startWaiting();
    this.#scheduleHeartbeat(j, heartbeatInterval(t.heartbeat_interval_ms, j.leaseLen));
  }

  /** Starts prefetched tasks while slots are free. */
  #startWaiting(): void {
    while (this.#waiting.length > 0 && this.#running < this.#o.concurrency && !this.#stopping) {
      const j = this.#waiting.shift()!;
      j.state = "running";
      this.#running++;
      this.#execute(j).catch((e) => this.#o.logger.error("worker bug: a task's run failed", { task_id: j.id, err: messageOf(e) }));
    }
  }

  /** Starts prefetched tasks in the slot a handler freed; notes when none was left for it. */
  #refill(): void {
    this.#startWaiting();
    // A slot idles while the queue has work: the prefetch room did not last until
    // the next poll's answer.
    if (this.#running < this.#o.concurrency && this.#waiting.length === 0 && !this.#room.lastShort && !this.#stopping) this.#room.starved = true;
  }

  /**
   * Runs the handler and reports its outcome, unless the shutdown took the task. A
   * task cancelled, or whose lease was lost, while it waited is reported without
   * running its handler.
   */
  async #execute(j: Held): Promise<void> {
    const h = this.#handlers.get(j.task.queue);
    const began = Date.now();
    const started = !j.aborted;
    let ok = false;
    let err: unknown;
    if (!started) {
      err = new Error(`not started: ${messageOf(j.reason)}`);
    } else if (!h) {
      err = new PermanentError(`worker ${this.#o.id} has no handler for queue ${JSON.stringify(j.task.queue)}`);
    } else {
      try {
        j.result = await h(j.job);
        ok = true;
      } catch (e) {
        err = e;
      }
    }
    if (j.owned) return; // the shutdown handed the task back already
    j.owned = true;
    let resultBytes = 0;
    if (ok && j.result !== undefined) {
      try {
        const s = JSON.stringify(j.result);
        if (s === undefined) j.result = undefined; // a function or symbol: no result
        else resultBytes = s.length;
      } catch (e) {
        ok = false;
        err = new PermanentError(`result of task ${j.id} is not JSON: ${messageOf(e)}`);
      }
    }
    const ackByPoll = ok && !j.lost && resultBytes <= MAX_POLL_ACK_RESULT;
    const handed = this.#handlerReturned(j, started ? Math.max(Date.now() - began, 0.001) : 0, ackByPoll);
    const reason = j.aborted ? j.reason : undefined;
    j.stopTimers();
    if (handed) return; // the next poll carries the ack
    if (j.lost) {
      this.#warnJob(j, "task not reported: its lease was lost, so another worker may run it", { handler_err: err === undefined ? undefined : messageOf(err) });
    } else if (ok) {
      this.#ack(j); // marks j done once the ack is delivered
      return;
    } else if (err instanceof SnoozeError) {
      await this.#snooze(j, err.delayMs);
    } else {
      const retry = findCause(err, RetryableError);
      let text = errorText(err);
      if (reason instanceof TaskCancelledError && isAbort(err)) text = "cancelled while executing";
      await this.#send(j, "nack", (signal) => this.#c.nack({
        worker_id: this.#o.id, task_id: j.id, lease_token: j.task.lease_token, error: text,
        retryable: !findCause(err, PermanentError), ...(retry?.retryAfterMs !== undefined ? { retry_after_ms: retry.retryAfterMs } : {}),
      }, { signal }));
    }
    this.#done(j);
  }

  /**
   * Frees j's slot while its outcome is reported, starts the next prefetched task
   * in it, and folds the handler's duration into the average that decides whether
   * to prefetch (ran is 0 when the handler did not run). When ackByPoll is set and
   * the poller is idle, the poll the freed slot sets off carries j's ack; so does the
   * next poll when the one out carries acks (it answers without waiting, and the next
   * follows at once), or when the last poll brought all it asked for (the one out is
   * held for up to POLL_ACK_HOLD_MS; after a short poll the ack goes at once). Then it
   * returns true, and the poller marks j done.
   */
  #handlerReturned(j: Held, ran: number, ackByPoll: boolean): boolean {
    this.#room.ran(ran);
    let handed = false;
    if (this.#active.has(j) && j.state === "running") {
      j.state = "reporting";
      this.#running--;
      const pollComing = this.#pollerIdle || ((this.#room.inFlight > 0 || this.#room.deferred) && (this.#ackPollsOut > 0 || !this.#room.lastShort));
      if (ackByPoll && pollComing && !this.#pollerGone && this.#pollAcks.length < MAX_POLL_TASKS) {
        this.#pollAcks.push(j);
        handed = true;
        if (!this.#pollerIdle && this.#ackPollsOut === 0 && this.#holdTimer === undefined) {
          // The poll out may wait for work, or the poller for room: do not hold the ack for long.
          this.#holdTimer = setTimeout(() => this.#holdEnded(), POLL_ACK_HOLD_MS);
        }
      }
    }
    this.#refill();
    this.#signalSlot();
    return handed;
  }

  /** Releases j for delayMs: back after it, without spending a retry. */
  async #snooze(j: Held, delayMs: number): Promise<void> {
    const reason = `snoozed for ${delayMs} ms by worker ${this.#o.id}`;
    await this.#send(j, "snooze", async (signal) => {
      try {
        await this.#c.release({ worker_id: this.#o.id, task_id: j.id, lease_token: j.task.lease_token, reason, delay_ms: Math.max(delayMs, 1) }, { signal });
      } catch (e) {
        if (!isErrorCode(e, "not_found")) throw e;
        // A server without the release endpoint: a retryable nack, which spends a retry.
        await this.#c.nack({ worker_id: this.#o.id, task_id: j.id, lease_token: j.task.lease_token, error: reason, retry_after_ms: delayMs }, { signal });
      }
    });
  }

  /** Sends a heartbeat of j carrying progress, taking in the lease it confirms. */
  async #reportProgress(j: Held, progress: unknown, o: CallOptions): Promise<void> {
    if (j.lost) throw new LeaseLostError(j.id);
    const t = o.signal ? undefined : withTimeout(this.#bg.signal, REPORT_TIMEOUT_MS);
    try {
      const a = await this.#c.heartbeatAnswer(this.#o.id, j.id, j.task.lease_token, { progress, signal: o.signal ?? t!.signal });
      j.extend(Date.now(), a.body.lease_expires_at, a.date);
      if (a.body.cancel_requested) j.abort(new TaskCancelledError(j.id));
    } catch (e) {
      if (isErrorCode(e, "lease_lost")) {
        j.lost = true;
        j.abort(lostReason(j, e));
        throw new LeaseLostError(j.id, { cause: e });
      }
      throw e;
    } finally {
      t?.dispose();
    }
  }

  /**
   * Queues j's ack. Acks of tasks finishing while another batch is in flight go
   * together (POST /workers/ack/batch), batch after batch; an ack a batch could not
   * deliver goes alone, with its retries.
   */
  #ack(j: Held): void {
    this.#ackQueue.push(j);
    if (this.#ackSending) return; // the sender in flight takes it
    this.#ackSending = true;
    void (async () => {
      try {
        while (this.#ackQueue.length > 0) await this.#ackBatch(this.#ackQueue.splice(0, MAX_POLL_TASKS));
      } catch (e) {
        this.#o.logger.error("worker bug: acks failed", { err: messageOf(e) });
      } finally {
        this.#ackSending = false;
      }
    })();
  }

  /** Sends one batch of acks and marks each job done. */
  async #ackBatch(batch: Held[]): Promise<void> {
    if (batch.length === 1) {
      await this.#ackOne(batch[0]!);
      this.#done(batch[0]!);
      return;
    }
    const t = withTimeout(this.#bg.signal, REPORT_TIMEOUT_MS);
    let results: Awaited<ReturnType<Client["ackBatchMinimal"]>> | undefined;
    try {
      // Only each ack's outcome matters here, not the done task: the minimal answer.
      results = await this.#c.ackBatchMinimal(this.#o.id, ackItems(batch), { signal: t.signal });
    } catch {
      results = undefined; // not delivered as a batch: one by one, with retries
    } finally {
      t.dispose();
    }
    for (const [i, j] of batch.entries()) {
      const e = results?.[i]?.error;
      if (!results) await this.#ackOne(j);
      else if (e) this.#warnJob(j, "ack refused: the lease was lost, so another worker may run the task", { err: `${e.code}: ${e.message}` });
      this.#done(j);
    }
  }

  /** Acks j alone, retrying through outages; a result the server refuses as too large dead-letters the task. */
  async #ackOne(j: Held): Promise<void> {
    let tooLarge: unknown;
    await this.#send(j, "ack", async (signal) => {
      try {
        await this.#c.ack(this.#o.id, j.id, j.task.lease_token, j.result, { signal });
      } catch (e) {
        if (!isErrorCode(e, "payload_too_large")) throw e;
        tooLarge = e;
      }
    });
    if (tooLarge !== undefined) {
      // The same result would be refused on every attempt.
      await this.#send(j, "nack", (signal) => this.#c.nack({
        worker_id: this.#o.id, task_id: j.id, lease_token: j.task.lease_token, error: `result refused: ${messageOf(tooLarge)}`, retryable: false,
      }, { signal }));
    }
  }

  /**
   * Makes a report (ack, nack, release), retrying with backoff while the server is
   * unreachable or unavailable, until the lease has surely expired (the server then
   * retries the task itself) or the run gives up at the end of its shutdown.
   */
  async #send(j: Held, what: string, call: (signal: AbortSignal) => Promise<unknown>): Promise<void> {
    const b = new Backoff(this.#o.retryMinMs, this.#o.retryMaxMs);
    for (;;) {
      const t = withTimeout(this.#bg.signal, REPORT_TIMEOUT_MS);
      let err: unknown;
      let ok = false;
      try {
        await call(t.signal);
        ok = true;
      } catch (e) {
        err = e;
      } finally {
        t.dispose();
      }
      if (ok) return;
      if (isErrorCode(err, "lease_lost")) {
        this.#warnJob(j, `${what} refused: the lease was lost, so another worker may run the task`, { err: messageOf(err) });
        return;
      }
      if (this.#bg.signal.aborted) {
        this.#errorJob(j, `${what} abandoned: the worker stopped; the server will retry the task when its lease expires`, { err: messageOf(err) });
        return;
      }
      if (!(err instanceof TaskForgeError && err.temporary) && !isTimeout(err)) {
        this.#errorJob(j, `${what} failed`, { err: messageOf(err) });
        return;
      }
      if (j.leaseExpired(Date.now())) {
        this.#errorJob(j, `${what} abandoned: the lease expired meanwhile; the server will retry the task`, { err: messageOf(err) });
        return;
      }
      const d = b.next();
      this.#warnJob(j, `${what} failed; retrying`, { in_ms: Math.round(d), err: messageOf(err) });
      await sleep(d, this.#bg.signal);
    }
  }

  /** Extends j's lease every interval until its heartbeats stop, aborting the handler when the task is cancelled or the lease lost. */
  #scheduleHeartbeat(j: Held, interval: number): void {
    if (j.hbStopped) return;
    j.hbTimer = setTimeout(() => {
      this.#heartbeat(j, interval).catch((e) => this.#warnJob(j, "worker bug: a heartbeat failed", { err: messageOf(e) }));
    }, interval);
  }

  async #heartbeat(j: Held, interval: number): Promise<void> {
    if (j.hbStopped) return;
    const t = withTimeout(this.#bg.signal, interval);
    let err: unknown;
    let a: Awaited<ReturnType<Client["heartbeatAnswer"]>> | undefined;
    try {
      a = await this.#c.heartbeatAnswer(this.#o.id, j.id, j.task.lease_token, { signal: t.signal });
    } catch (e) {
      err = e;
    } finally {
      t.dispose();
    }
    if (j.hbStopped) return; // the handler returned meanwhile; a 409 may just mean it was acked
    if (a) {
      j.extend(Date.now(), a.body.lease_expires_at, a.date);
      if (a.body.cancel_requested && !j.aborted) j.abort(new TaskCancelledError(j.id));
    } else if (isErrorCode(err, "lease_lost")) {
      j.lost = true;
      j.abort(lostReason(j, err));
      this.#warnJob(j, "lease lost; handler aborted", { err: messageOf(err) });
      return;
    } else if (j.leaseExpired(Date.now())) {
      j.lost = true;
      j.abort(new LeaseLostError(j.id, { cause: err }));
      this.#warnJob(j, "heartbeats failed until the lease expired; handler aborted", { err: messageOf(err) });
      return;
    } else {
      this.#warnJob(j, "heartbeat failed; retrying at the next interval", { err: messageOf(err) });
    }
    this.#scheduleHeartbeat(j, heartbeatInterval(j.task.heartbeat_interval_ms, j.leaseLen));
  }

  /** Forgets j, freeing its slot. */
  #done(j: Held): void {
    if (!this.#active.delete(j)) return;
    j.stopTimers();
    if (j.state === "waiting") this.#waiting = this.#waiting.filter((w) => w !== j);
    else if (j.state === "running") this.#running--;
    this.#startWaiting();
    this.#signalSlot();
    if (this.#active.size === 0) {
      const ws = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const w of ws) w();
    }
  }

  #idle(): Promise<void> {
    if (this.#active.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Waits up to the grace period for the held tasks, then hands back the rest, and waits (bounded) for every report. */
  async #shutdown(): Promise<void> {
    let final: ReturnType<typeof setTimeout> | undefined;
    try {
      const grace = this.#o.shutdownGraceMs;
      if (grace > 0 && this.#active.size > 0) {
        const timer = withTimeout(undefined, grace);
        await Promise.race([this.#idle(), new Promise((r) => timer.signal.addEventListener("abort", r, { once: true }))]);
        timer.dispose();
      }
      if (this.#active.size === 0) return;
      this.#stopping = true; // prefetched tasks not started by now are handed back too
      for (const j of [...this.#active]) {
        if (j.owned) continue; // its handler returned; its report is on the way
        j.owned = true;
        const unstarted = j.state === "waiting";
        j.stopTimers();
        if (!j.aborted) j.abort(new WorkerStoppingError(this.#o.id));
        if (j.lost) {
          this.#done(j);
          continue;
        }
        const why = unstarted ? "before the prefetched task started" : "before the handler finished";
        const reason = `worker ${this.#o.id} shut down ${why}; handed back for another worker`;
        void this.#send(j, "release", async (signal) => {
          try {
            await this.#c.release({ worker_id: this.#o.id, task_id: j.id, lease_token: j.task.lease_token, reason }, { signal });
          } catch (e) {
            if (!isErrorCode(e, "not_found")) throw e;
            // A server older than /workers/release: a retryable nack without delay.
            await this.#c.nack({ worker_id: this.#o.id, task_id: j.id, lease_token: j.task.lease_token, error: reason, retry_after_ms: 0 }, { signal });
          }
        }).then(() => this.#done(j));
      }
      final = setTimeout(() => this.#bg.abort(new WorkerStoppingError(this.#o.id)), FINAL_REPORT_MS);
      await this.#idle();
    } finally {
      clearTimeout(final);
      for (const j of this.#active) j.stopTimers();
      if (!this.#bg.signal.aborted) this.#bg.abort(new WorkerStoppingError(this.#o.id));
    }
  }

  #warnJob(j: Held, msg: string, fields: Record<string, unknown>): void {
    this.#o.logger.warn(msg, { task_id: j.id, queue: j.task.queue, attempt: j.task.attempt, ...fields });
  }

  #errorJob(j: Held, msg: string, fields: Record<string, unknown>): void {
    this.#o.logger.error(msg, { task_id: j.id, queue: j.task.queue, attempt: j.task.attempt, ...fields });
  }
}

/** A poll's answer (res), or its failure (err). */
interface Polled {
  /** The room the poll was planned for, and the tasks it asked for (less against an older server). */
  want: number;
  asked: number;
  shape: { prefetch?: boolean; prefetch_tasks?: number };
  /** The tasks whose acks the poll carried. */
  acks: Held[];
  sent: number;
  recv: number;
  res: PollResult | undefined;
  date: number | undefined;
  err: unknown;
}

function ackItems(jobs: Held[]): AckItem[] {
  return jobs.map((j) => (j.result === undefined ? { task_id: j.id, lease_token: j.task.lease_token } : { task_id: j.id, lease_token: j.task.lease_token, result: j.result }));
}

/** The first error of class C in err's cause chain. */
function findCause<C extends abstract new (...args: never[]) => Error>(err: unknown, cls: C): InstanceType<C> | undefined {
  for (let e = err, depth = 0; e instanceof Error && depth < 16; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof cls) return e as InstanceType<C>;
  }
  return undefined;
}

function isAbort(err: unknown): boolean {
  return (err instanceof DOMException && err.name === "AbortError") || err instanceof TaskCancelledError;
}

const encoder = new TextEncoder();

/** err's text for a nack: its message (with its class when that says something), cut to the server's limit. */
function errorText(err: unknown): string {
  let s: string;
  if (err instanceof Error) {
    s = err.message || `${err.name} with an empty message`;
    if (err.name && err.name !== "Error" && !(err instanceof PermanentError) && !(err instanceof RetryableError)) s = `${err.name}: ${s}`;
  } else {
    s = messageOf(err) || "handler threw an empty value";
  }
  if (encoder.encode(s).length > MAX_ERROR_BYTES) {
    while (encoder.encode(s).length > MAX_ERROR_BYTES) s = s.slice(0, Math.floor(s.length * 0.9));
    s += "\n… (truncated)";
  }
  return s;
}

/** The default logger: one line per message on stderr. */
function stderrLogger(id: string): Logger {
  const line = (level: string, msg: string, fields?: Record<string, unknown>) =>
    console.error(`taskforge worker ${id} ${level}: ${msg}${fields ? " " + JSON.stringify(fields) : ""}`);
  return { warn: (m, f) => line("warn", m, f), error: (m, f) => line("error", m, f) };
}

/**
 * An AbortSignal that aborts on the first of signals (default SIGTERM and SIGINT),
 * for {@link Worker.run}. After the first signal its handlers are removed, so a
 * second one ends the process the default way. Call dispose to stop listening.
 */
export function shutdownSignal(signals: string[] = ["SIGTERM", "SIGINT"]): { signal: AbortSignal; dispose: () => void } {
  const ac = new AbortController();
  const on = (sig: string) => {
    dispose();
    ac.abort(new Error(`received ${sig}`));
  };
  const dispose = () => {
    for (const s of signals) process.off(s, on);
  };
  for (const s of signals) process.on(s, on);
  return { signal: ac.signal, dispose };
}
