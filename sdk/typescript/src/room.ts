/**
 * The worker's poll planning: how many tasks the next poll asks for (free slots
 * and prefetch room), whether it goes now or waits for more room, how many polls
 * are out, and how the prefetch room adapts to the answers. It holds no tasks:
 * the worker tells it how many run and how many wait. Internal to the SDK (not
 * exported by the package); its own module so that tests can drive it.
 */

/** The most tasks one poll may claim or one batch may ack. */
export const MAX_POLL_TASKS = 100;
/** Bounds the adapted prefetch room together with the slots: two full polls. */
export const AUTO_PREFETCH_MAX = 2 * MAX_POLL_TASKS;
/**
 * How many polls the worker keeps out at once. A second poll goes only while
 * handlers run short and the queue has work, and only for a room worth a poll,
 * so that the next tasks are on their way while the server answers the first.
 */
export const MAX_POLLS_IN_FLIGHT = 2;

/** The next poll as planned: its size, or (go false) none now. */
export interface PollPlan {
  /** A poll goes now, for free + prefetch tasks. */
  go: boolean;
  free: number;
  prefetch: number;
  /** No poll goes: the acks held for one go alone now (nothing to ask for, or the hold ran out). */
  acksAlone: boolean;
}

export class PollRoom {
  readonly concurrency: number;
  /** The prefetch room set or defaulted; 0: no prefetching. */
  readonly prefetch: number;
  readonly prefetchBelowMs: number;
  /** The prefetch was left to its default, so the room adapts from prefetch up to AUTO_PREFETCH_MAX less the slots. */
  readonly autoPrefetch: boolean;
  /**
   * The prefetch room the next poll may fill. Adapting, it doubles when a full poll
   * comes back after the slots ran dry while the queue had work (starved), shrinks
   * by a quarter when one comes back with tasks still waiting, and falls back to
   * prefetch when one comes back short (the queue ran dry).
   */
  prefetchNow: number;
  starved = false;
  /**
   * The last poll answered brought fewer tasks than it asked for: the queue ran dry,
   * so a poll out without acks is likely waiting for work.
   */
  lastShort = false;
  /** Moving average of handler durations (ms); 0 until one returned. */
  avgRun = 0;
  /** Polls out, asking for `asked` tasks in all: the room they may fill counts as held. */
  inFlight = 0;
  asked = 0;
  /**
   * The poller waits with a room too small to be worth a poll while tasks wait at
   * hand (or a poll is out); forcePoll: the hold of acks ran out meanwhile, so the
   * next poll goes whatever its size.
   */
  deferred = false;
  forcePoll = false;

  constructor(concurrency: number, prefetch: number, prefetchBelowMs: number, autoPrefetch: boolean) {
    this.concurrency = concurrency;
    this.prefetch = prefetch;
    this.prefetchBelowMs = prefetchBelowMs;
    this.autoPrefetch = autoPrefetch && prefetch > 0;
    this.prefetchNow = prefetch;
  }

  /** Whether the worker prefetches now: it may, and its handlers run short. */
  prefetching(): boolean {
    return this.prefetch > 0 && this.avgRun > 0 && this.avgRun < this.prefetchBelowMs;
  }

  /**
   * The free slots and, while handlers run short, the prefetch room left (at most
   * MAX_POLL_TASKS in all, free slots first), with running handlers and waiting
   * tasks held; the tasks the polls out asked for count as waiting.
   */
  size(running: number, waiting: number): { free: number; prefetch: number } {
    const held = waiting + this.asked;
    let free = Math.max(this.concurrency - running - held, 0);
    let prefetch = 0;
    // Waiting tasks beyond the slots they will fill are prefetched ones.
    if (this.prefetching()) prefetch = Math.max(this.prefetchNow - Math.max(held + running - this.concurrency, 0), 0);
    free = Math.min(free, MAX_POLL_TASKS);
    return { free, prefetch: Math.min(prefetch, MAX_POLL_TASKS - free) };
  }

  /**
   * Whether a poll for want tasks goes now. With no poll out, a poll goes unless
   * more tasks wait at hand than it would bring and it would fill less than half
   * the room of the slots and the prefetch: those tasks keep the slots busy while
   * the room grows to a poll worth its round trip. A second poll goes only while
   * handlers run short and the queue has work, and only for half that room (at
   * most a full poll). The hold of acks forces one (forcePoll), within
   * MAX_POLLS_IN_FLIGHT.
   */
  pollNow(want: number, waiting: number): boolean {
    const worth = want >= Math.min(Math.floor((this.concurrency + this.prefetchNow) / 2), MAX_POLL_TASKS);
    if (this.inFlight >= MAX_POLLS_IN_FLIGHT) return false;
    if (this.forcePoll) return true;
    if (this.inFlight === 0) return worth || waiting <= want || !this.prefetching();
    return worth && !this.lastShort && this.prefetching();
  }

  /** Plans the next poll with running handlers and waiting tasks held; the caller sends it (sent) when it goes. */
  plan(running: number, waiting: number): PollPlan {
    const { free, prefetch } = this.size(running, waiting);
    const want = free + prefetch;
    if (want > 0 && this.pollNow(want, waiting)) {
      this.forcePoll = false;
      this.deferred = false;
      return { go: true, free, prefetch, acksAlone: false };
    }
    // Idle: nothing to ask for and no poll out; a freed slot sets off the next
    // poll at once. Deferred: the room is small while tasks wait or a poll is out.
    const idle = this.inFlight === 0 && want <= 0;
    this.deferred = !idle;
    const acksAlone = this.forcePoll || idle;
    this.forcePoll = false;
    return { go: false, free: 0, prefetch: 0, acksAlone };
  }

  /** A poll for want tasks went out. */
  sent(want: number): void {
    this.inFlight++;
    this.asked += want;
  }

  /** A poll for want tasks failed: it claimed nothing and says nothing of the queue. */
  failed(want: number): void {
    this.inFlight--;
    this.asked -= want;
  }

  /**
   * A poll planned for want tasks came back, short (fewer than it asked for) or
   * not, while waiting tasks were still at hand (those it brought not counted).
   */
  answered(want: number, short: boolean, waiting: number): void {
    this.inFlight--;
    this.asked -= want;
    this.adapt(short, waiting);
    this.lastShort = short;
  }

  /** Adapts the prefetch room to a poll's answer (see prefetchNow), when it adapts at all. */
  adapt(short: boolean, waiting: number): void {
    if (this.autoPrefetch) {
      if (short) this.prefetchNow = this.prefetch;
      else if (this.starved) this.prefetchNow = Math.min(this.prefetchNow * 2, Math.max(AUTO_PREFETCH_MAX - this.concurrency, this.prefetch));
      else if (waiting > 0) this.prefetchNow = Math.max(this.prefetchNow - Math.floor(this.prefetchNow / 4), this.prefetch);
    }
    this.starved = false;
  }

  /** Folds a handler's duration (ms; 0 when it did not run) into the average that decides whether to prefetch. */
  ran(ms: number): void {
    if (ms > 0) this.avgRun = this.avgRun === 0 ? ms : this.avgRun + (ms - this.avgRun) / 5;
  }
}
