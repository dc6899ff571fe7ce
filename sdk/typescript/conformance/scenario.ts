// The conformance scenario of the TypeScript SDK: the same script the other SDKs
// run, checked from PostgreSQL by the same Go test.
//
// Environment: TASKFORGE_URL (the server) and TASKFORGE_QUEUE (an existing queue;
// the server's lease is short, 2 s); TASKFORGE_TOKEN too when the server has API
// tokens. Prints one JSON line
// {"ack":id,"nack":id,"fail":id,"replay":id,"hold":id} on stdout and exits 0.
//
//   a. enqueue "ack", "nack" (max_retries 3) and "fail" (max_retries 3);
//   b. run the worker runtime (concurrency 4): ack reports progress {"pct":50},
//      works 3 s (past the lease: heartbeats keep it) and returns a result; nack
//      fails once with a retryable "transient" error (retry after 200 ms), then
//      succeeds; fail fails permanently the first time, and succeeds when replayed;
//   c. wait until ack and nack are done and fail is dead; replay fail; wait for it;
//   d. enqueue "hold"; once its handler holds it, SIGTERM this process: the
//      runtime's signal helper stops it, and it releases the task (budget unspent).

import { Client, RetryableError, PermanentError, Worker, isTerminal, shutdownSignal, type Job, type Task } from "../src/index.js";

const url = process.env["TASKFORGE_URL"];
const queue = process.env["TASKFORGE_QUEUE"];
if (!url || !queue) {
  console.error("scenario: set TASKFORGE_URL and TASKFORGE_QUEUE");
  process.exit(2);
}

/** Fails the scenario: a message on stderr, exit 1. */
function fail(msg: string): never {
  console.error(`scenario: ${msg}`);
  process.exit(1);
}

/** Waits (GET ?wait_ms) until the task is terminal, for at most timeoutMs, and checks its status. */
async function waitFor(c: Client, id: string, want: Task["status"], timeoutMs = 30_000): Promise<Task> {
  const t = await c.waitTask(queue!, id, { timeoutMs });
  if (t.status !== want) fail(`task ${id}: status ${t.status} after ${timeoutMs} ms, want ${want}${isTerminal(t.status) ? "" : " (still running)"}`);
  return t;
}

const c = new Client(url, { token: process.env["TASKFORGE_TOKEN"] });
const sleepAbortable = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason);
    }, { once: true });
  });

let held: () => void = () => {};
const holding = new Promise<void>((resolve) => (held = resolve));
let holdEnqueued: (id: string) => void = () => {};
const holdId = new Promise<string>((resolve) => (holdEnqueued = resolve));
let failSeen = 0;

async function handler(job: Job): Promise<unknown> {
  const kind = (job.payload as { kind?: string } | null)?.kind;
  switch (kind) {
    case "ack":
      await job.progress({ pct: 50 });
      await sleepAbortable(3_000, job.signal);
      return { kind: "ack", ok: true };
    case "nack":
      if (job.attempt === 1) throw new RetryableError("transient", { retryAfterMs: 200 });
      return { kind: "nack", ok: true };
    case "fail":
      if (failSeen++ === 0) throw new PermanentError("permanent failure");
      return { kind: "fail", ok: true };
    case "grouped":
      return { kind: "grouped", ok: true };
    case "hold":
      // A hold task of an earlier run (the queue is not fresh) is held too, but
      // only this run's tells the main flow to stop.
      if (job.id === (await holdId)) held();
      // Until the runtime stops and its grace ends: then the task is released.
      await new Promise((resolve) => job.signal.addEventListener("abort", resolve, { once: true }));
      return undefined;
    default:
      throw new PermanentError(`unknown kind ${JSON.stringify(kind)}`);
  }
}

await c.putGroup(queue, "tenant-a", { weight: 3, max_concurrency: 1 });
const ack = await c.enqueue(queue, { payload: { kind: "ack" } });
const nack = await c.enqueue(queue, { payload: { kind: "nack" }, max_retries: 3 });
const failed = await c.enqueue(queue, { payload: { kind: "fail" }, max_retries: 3 });
const grouped = await c.enqueue(queue, { payload: { kind: "grouped" }, group: "tenant-a" });

const w = new Worker(c, { concurrency: 4, pollWaitMs: 2_000, shutdownGraceMs: 500 });
w.handle(queue, handler);
const stop = shutdownSignal();
const running = w.run(stop.signal);
let runError: unknown;
running.catch((e) => {
  runError = e;
  fail(`worker run: ${e instanceof Error ? e.message : String(e)}`);
});

await waitFor(c, ack.id, "done");
await waitFor(c, nack.id, "done");
await waitFor(c, failed.id, "dead");
await waitFor(c, grouped.id, "done");
const replay = await c.replayDead(queue, failed.id);
await waitFor(c, replay.id, "done");

const hold = await c.enqueue(queue, { payload: { kind: "hold" } });
holdEnqueued(hold.id);
const noHold = setTimeout(() => fail("hold never reached a handler"), 30_000);
await holding;
clearTimeout(noHold);
process.kill(process.pid, "SIGTERM");
await running;
stop.dispose();
if (runError !== undefined) fail(String(runError));

process.stdout.write(JSON.stringify({ ack: ack.id, nack: nack.id, fail: failed.id, replay: replay.id, hold: hold.id, grouped: grouped.id }) + "\n");
