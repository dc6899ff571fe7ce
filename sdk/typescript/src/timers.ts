/**
 * The worker runtime's timing: signals with a deadline for every request, kept free
 * of leaks (each derived signal is cleaned up, its timer cleared and its listener on
 * the parent removed, when the call ends), the outage backoff, and the heartbeat
 * interval.
 */

/** A signal that aborts when parent does, or after ms with a TimeoutError; call dispose when done. */
export function withTimeout(parent: AbortSignal | undefined, ms: number): { signal: AbortSignal; dispose: () => void } {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(new DOMException(`timed out after ${ms} ms`, "TimeoutError")), ms);
  const onAbort = () => ac.abort(parent?.reason);
  if (parent) {
    if (parent.aborted) ac.abort(parent.reason);
    else parent.addEventListener("abort", onAbort, { once: true });
  }
  return {
    signal: ac.signal,
    dispose: () => {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onAbort);
    },
  };
}

/** True when err is the TimeoutError of {@link withTimeout} (or AbortSignal.timeout). */
export function isTimeout(err: unknown): boolean {
  return err instanceof DOMException && err.name === "TimeoutError";
}

/** Resolves after ms, or at once when signal aborts (never rejects). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * Jittered, exponentially growing delays between min and max: each delay is drawn
 * from [d/2, d] where d doubles from min up to max.
 */
export class Backoff {
  #cur = 0;
  constructor(readonly min: number, readonly max: number) {}

  /** The delay before the next try, in ms. */
  next(): number {
    this.#cur = this.#cur === 0 ? this.min : Math.min(this.#cur * 2, this.max);
    const half = this.#cur / 2;
    return half + Math.random() * (this.#cur - half);
  }

  /** Starts over from min after a success. */
  reset(): void {
    this.#cur = 0;
  }
}

/** The heartbeat interval when neither the server nor the lease says one, in ms. */
const DEFAULT_HEARTBEAT_MS = 10_000;

/**
 * The heartbeat interval of a task: the one the server advertises, and at most a
 * third of the lease as estimated from lease_expires_at (the estimate errs long by
 * under a second, so a third still beats well inside the lease).
 */
export function heartbeatInterval(advertisedMs: number, leaseLenMs: number): number {
  let d = advertisedMs > 0 ? advertisedMs : Infinity;
  if (leaseLenMs > 0) d = Math.min(d, leaseLenMs / 3);
  return Math.max(Number.isFinite(d) ? d : DEFAULT_HEARTBEAT_MS, 50);
}
