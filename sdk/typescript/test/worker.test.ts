// The worker runtime against a real server.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  Client,
  PermanentError,
  TaskCancelledError,
  TaskTimeoutError,
  Worker,
  WorkerStoppingError,
  retryAfter,
  snooze,
  type Job,
  type Task,
} from "../src/index.js";
import { client, eventually, freshQueue, leaseMs, logger, url, worker } from "./helpers.js";

/** Runs w until the returned stop is called; stop resolves when run does. */
function start(w: Worker): { stop: () => Promise<void>; done: Promise<void> } {
  const ac = new AbortController();
  const done = w.run(ac.signal);
  return { done, stop: () => (ac.abort(), done) };
}

async function waitAll(q: string, ids: string[], status: Task["status"], timeoutMs = 20_000): Promise<Task[]> {
  return Promise.all(ids.map(async (id) => {
    const t = await client.waitTask(q, id, { timeoutMs });
    assert.equal(t.status, status, `task ${id}`);
    return t;
  }));
}

test("runs at most `concurrency` handlers at once and acks each with its result", async () => {
  const q = await freshQueue("conc");
  const tasks = await client.enqueueBatch(q, Array.from({ length: 9 }, (_, n) => ({ payload: { n } })));
  let now = 0;
  let peak = 0;
  const w = worker({ concurrency: 3 }).handle(q, async (job: Job) => {
    peak = Math.max(peak, ++now);
    await new Promise((r) => setTimeout(r, 100));
    now--;
    return { doubled: (job.payload as { n: number }).n * 2 };
  });
  const r = start(w);
  const done = await waitAll(q, tasks.map((t) => t.id), "done");
  await r.stop();
  assert.equal(peak, 3);
  done.forEach((t, n) => assert.deepEqual(t.result, { doubled: n * 2 }));
  assert.ok(done.every((t) => t.attempt_history?.length === 1 && t.attempt_history[0]!.worker_id === w.id));
});

test("short handlers: prefetched tasks, and acks that ride on polls", async () => {
  const q = await freshQueue("prefetch");
  const paths = new Map<string, number>();
  let prefetchPolls = 0;
  let pollAcks = 0;
  const counting: typeof fetch = (input, init) => {
    const path = new URL(String(input)).pathname;
    paths.set(path, (paths.get(path) ?? 0) + 1);
    if (path === "/workers/poll" && typeof init?.body === "string") {
      const body = JSON.parse(init.body) as { prefetch_tasks?: number; acks?: unknown[] };
      if ((body.prefetch_tasks ?? 0) > 0) prefetchPolls++;
      pollAcks += body.acks?.length ?? 0;
    }
    return fetch(input, init);
  };
  const n = 30;
  const tasks = await client.enqueueBatch(q, Array.from({ length: n }, (_, i) => ({ payload: i })));
  const w = new Worker(new Client(url, { fetch: counting }), { concurrency: 2, pollWaitMs: 1_000, logger: logger() });
  w.handle(q, async (job) => {
    await new Promise((r) => setTimeout(r, 50));
    return job.payload;
  });
  const r = start(w);
  const done = await waitAll(q, tasks.map((t) => t.id), "done");
  await r.stop();
  assert.deepEqual(done.map((t) => t.result), tasks.map((t) => t.payload));
  // How many acks ride on polls depends on how fast polls answer (a busy box makes
  // more go alone), so this asserts only that both paths are taken and bounded.
  const requests = [...paths.values()].reduce((a, b) => a + b, 0);
  assert.ok(prefetchPolls > 0, "the worker prefetched");
  assert.ok(pollAcks > 0, "some acks rode on polls");
  assert.ok(requests <= 2 * n + 4, `${requests} requests for ${n} tasks: ${JSON.stringify([...paths])}`);
});

test("one poll asks for the free slots and the prefetch room together", async () => {
  const q = await freshQueue("mixed");
  const polls: { max_tasks?: number; prefetch_tasks?: number; prefetch?: boolean }[] = [];
  const logging: typeof fetch = (input, init) => {
    if (new URL(String(input)).pathname === "/workers/poll" && typeof init?.body === "string") polls.push(JSON.parse(init.body));
    return fetch(input, init);
  };
  const tasks = await client.enqueueBatch(q, Array.from({ length: 40 }, (_, i) => ({ payload: i })));
  const w = new Worker(new Client(url, { fetch: logging }), { concurrency: 2, prefetch: 2, pollWaitMs: 1_000, logger: logger() });
  w.handle(q, async () => null);
  const r = start(w);
  await waitAll(q, tasks.map((t) => t.id), "done");
  await r.stop();
  // A prefetch set stays: at most two free and two prefetched.
  assert.ok(polls.every((p) => (p.max_tasks ?? 1) <= 4 && (p.prefetch_tasks ?? 0) <= 2 && !p.prefetch), JSON.stringify(polls));
  assert.ok(polls.some((p) => p.max_tasks === 4 && p.prefetch_tasks === 2), `no poll asked for 2 free and 2 prefetched: ${JSON.stringify(polls)}`);
});

test("the default prefetch room grows while handlers outrun polls", { timeout: 60_000 }, async () => {
  const q = await freshQueue("adapt");
  const polls: { max_tasks?: number }[] = [];
  const logging: typeof fetch = (input, init) => {
    if (new URL(String(input)).pathname === "/workers/poll" && typeof init?.body === "string") polls.push(JSON.parse(init.body));
    return fetch(input, init);
  };
  const log = logger();
  const w = new Worker(new Client(url, { fetch: logging }), { concurrency: 2, pollWaitMs: 1_000, logger: log });
  await drain(q, 1_000, w, log);
  const most = Math.max(...polls.map((p) => p.max_tasks ?? 1));
  // Two slots and, by default, two prefetched at first; then up to a full poll.
  assert.ok(most > 4 && most <= 100, `the largest poll asked for ${most} tasks over ${polls.length} polls`);
});

test("a server older than prefetch_tasks: the worker polls as before, and runs every task", async () => {
  const q = await freshQueue("oldserver");
  const polls: { refused: boolean; prefetch_tasks?: number }[] = [];
  const older: typeof fetch = (input, init) => {
    if (new URL(String(input)).pathname === "/workers/poll" && typeof init?.body === "string") {
      const body = JSON.parse(init.body) as { prefetch_tasks?: number };
      const refused = body.prefetch_tasks !== undefined;
      polls.push({ refused, ...body });
      if (refused) {
        return Promise.resolve(new Response(JSON.stringify({ error: { code: "invalid_request", message: 'json: unknown field "prefetch_tasks"' } }),
          { status: 400, headers: { "content-type": "application/json" } }));
      }
    }
    return fetch(input, init);
  };
  const tasks = await client.enqueueBatch(q, Array.from({ length: 40 }, (_, i) => ({ payload: i })));
  const log = logger();
  const w = new Worker(new Client(url, { fetch: older }), { concurrency: 4, pollWaitMs: 1_000, logger: log });
  w.handle(q, async () => null);
  const r = start(w);
  await waitAll(q, tasks.map((t) => t.id), "done");
  await r.stop();
  const first = polls.findIndex((p) => p.refused);
  assert.ok(first >= 0, "the worker never sent prefetch_tasks; the test proves nothing");
  assert.ok(polls.slice(first + 1).every((p) => !p.refused && p.prefetch_tasks === undefined), JSON.stringify(polls));
  assert.ok(log.lines.some((l) => l.includes("prefetch_tasks")), "the worker warned of the older server");
});

/** A fetch that logs the worker's polls and how many were out at once, asking for how many tasks in all. */
function pollsOut(): { logging: typeof fetch; polls: { max_tasks?: number; prefetch_tasks?: number }[]; most: { polls: number; tasks: number } } {
  const polls: { max_tasks?: number; prefetch_tasks?: number }[] = [];
  const most = { polls: 0, tasks: 0 };
  let out = 0;
  let outTasks = 0;
  const logging: typeof fetch = async (input, init) => {
    if (new URL(String(input)).pathname !== "/workers/poll" || typeof init?.body !== "string") return fetch(input, init);
    const body = JSON.parse(init.body) as { max_tasks?: number; prefetch_tasks?: number };
    polls.push(body);
    const n = body.max_tasks ?? 1;
    out++;
    outTasks += n;
    most.polls = Math.max(most.polls, out);
    most.tasks = Math.max(most.tasks, outTasks);
    try {
      return await fetch(input, init);
    } finally {
      out--;
      outTasks -= n;
    }
  };
  return { logging, polls, most };
}

/**
 * Enqueues n tasks in batches of 500, registers a no-op handler and runs w (built
 * on a client with fetch) until its handlers have run all n, then stops it at once,
 * while the last acks are still held for a poll or on their way. run resolves only
 * once every ack is committed, so the queue, read once after it, shows all n done.
 */
async function drain(q: string, n: number, w: Worker, log: { lines: string[] }): Promise<void> {
  for (let done = 0; done < n; done += 500) await client.enqueueBatch(q, Array.from({ length: Math.min(500, n - done) }, (_, i) => ({ payload: done + i })));
  const ran = new Set<string>();
  let allRan!: () => void;
  const all = new Promise<void>((resolve) => (allRan = resolve));
  w.handle(q, (job) => {
    ran.add(job.id);
    if (ran.size === n) allRan();
    return null;
  });
  const r = start(w);
  await all;
  await r.stop();
  // An ack refused (the lease lost, say when a busy box delayed it past a 2 s
  // lease) is reported, not committed.
  const done = (await client.stats(q)).depth.done ?? 0;
  const refused = log.lines.filter((l) => l.includes("refused")).length;
  assert.equal(done + refused, n, `${done} of ${n} tasks done and ${refused} acks reported refused when run resolved: it resolved before every ack was committed`);
}

test("a stop waits for the answer of a poll that carries acks", { timeout: 60_000 }, async () => {
  // The first poll carrying acks is answered (its acks committed), and its answer
  // is handed over only once the worker was told to stop: unless the stop aborted
  // it, as it aborts a poll waiting for work. An aborted one leaves the acks' fate
  // unknown: the worker sends them again, and they are refused (the leases are gone).
  const q = await freshQueue("stopacks");
  let stopping!: () => void;
  const stopped = new Promise<void>((resolve) => (stopping = resolve));
  let held!: () => void;
  const heldPoll = new Promise<void>((resolve) => (held = resolve));
  const carried: string[] = [];
  const holding: typeof fetch = async (input, init) => {
    const resp = await fetch(input, init);
    if (new URL(String(input)).pathname !== "/workers/poll" || typeof init?.body !== "string" || carried.length > 0) return resp;
    const acks = (JSON.parse(init.body) as { acks?: { task_id: string }[] }).acks ?? [];
    if (acks.length === 0) return resp;
    carried.push(...acks.map((a) => a.task_id));
    held();
    await stopped;
    if (init.signal?.aborted) throw init.signal.reason;
    return resp;
  };
  await client.enqueueBatch(q, Array.from({ length: 20 }, (_, i) => ({ payload: i })));
  const log = logger();
  const w = new Worker(new Client(url, { fetch: holding }), { concurrency: 2, pollWaitMs: 1_000, shutdownGraceMs: 1_000, logger: log });
  w.handle(q, () => null);
  const ac = new AbortController();
  const running = w.run(ac.signal);
  await heldPoll;
  ac.abort();
  stopping();
  await running;
  assert.deepEqual(await Promise.all(carried.map(async (id) => (await client.getTask(q, id)).status)), carried.map(() => "done"));
  assert.deepEqual(log.lines.filter((l) => l.includes("refused")), []);
});

test("run resolves only after every held ack is committed", { timeout: 60_000 }, async () => {
  const q = await freshQueue("flush");
  const log = logger();
  const w = new Worker(new Client(url), { concurrency: 8, pollWaitMs: 1_000, logger: log });
  await drain(q, 1_000, w, log);
});

test("handlers that outrun polls: a second poll goes out while the first is out, never a third", { timeout: 60_000 }, async () => {
  const q = await freshQueue("pipeline");
  const { logging, polls, most } = pollsOut();
  const log = logger();
  const w = new Worker(new Client(url, { fetch: logging }), { concurrency: 16, pollWaitMs: 1_000, logger: log });
  await drain(q, 3_000, w, log);
  assert.equal(most.polls, 2, `at most ${most.polls} polls were out at once over ${polls.length} polls`);
});

test("a set prefetch: the polls out at once never ask beyond the slots and that prefetch", { timeout: 60_000 }, async () => {
  const q = await freshQueue("pipeline-set");
  const { logging, polls, most } = pollsOut();
  const log = logger();
  const w = new Worker(new Client(url, { fetch: logging }), { concurrency: 4, prefetch: 4, pollWaitMs: 1_000, logger: log });
  await drain(q, 500, w, log);
  assert.ok(polls.every((p) => (p.max_tasks ?? 1) <= 8 && (p.prefetch_tasks ?? 0) <= 4), JSON.stringify(polls));
  assert.ok(most.tasks <= 8, `the polls out at once asked for ${most.tasks} tasks: beyond 4 slots and a prefetch of 4`);
});

/** A fetch that counts the worker's polls and the acks it sends alone; secondPoll resolves as the second poll goes out. */
function countAckCalls(): { counting: typeof fetch; calls: { polls: number; alone: number }; secondPoll: Promise<void> } {
  const calls = { polls: 0, alone: 0 };
  let second: () => void = () => {};
  const secondPoll = new Promise<void>((resolve) => (second = resolve));
  const counting: typeof fetch = (input, init) => {
    const path = new URL(String(input)).pathname;
    if (path === "/workers/poll" && ++calls.polls >= 2) second();
    if (path === "/workers/ack" || path === "/workers/ack/batch") calls.alone++;
    return fetch(input, init);
  };
  return { counting, calls, secondPoll };
}

// An ack does not wait behind a poll waiting for work. With a single task the first
// poll comes back short (the queue ran dry) and the ack goes at once. With two, the
// first poll brings both it asked for; the failing one frees its slot, a poll without
// acks goes out and waits up to 30 s while the second returns, and its ack is held up
// to 50 ms, then goes alone or on a second poll (which, carrying acks, does not wait
// for work). Either way one request takes it, well before the 30 s poll.
for (const c of [
  { name: "an ack does not wait behind a poll waiting for work: after a short poll", payloads: ["only"] },
  { name: "an ack does not wait behind a poll waiting for work: after a full poll", payloads: ["fail", "second"] },
]) {
  test(c.name, async () => {
    const q = await freshQueue("held");
    const { counting, calls, secondPoll } = countAckCalls();
    const tasks = await client.enqueueBatch(q, c.payloads.map((payload) => ({ payload })));
    const w = new Worker(new Client(url, { fetch: counting }), { concurrency: 2, pollWaitMs: 30_000, shutdownGraceMs: 1_000, logger: logger() });
    w.handle(q, async (job) => {
      if (job.payload === "fail") throw new PermanentError("fails at once");
      await secondPoll;
      return null;
    });
    const r = start(w);
    // 20 s: well under the 30 s the held ack would wait for that poll.
    await waitAll(q, [tasks[tasks.length - 1]!.id], "done", 20_000);
    await r.stop();
    // The ack's request: an ack alone, or a third poll.
    assert.equal(calls.alone + Math.max(calls.polls - 2, 0), 1, `the ack went once: ${JSON.stringify(calls)}`);
  });
}

test("acks queued behind one in flight go as one minimal batch (Prefer: return=minimal)", async () => {
  const q = await freshQueue("ackbatch");
  const batches: { n: number; prefer: string | null; applied: string | null }[] = [];
  let single = 0;
  const slowAcks: typeof fetch = async (input, init) => {
    const path = new URL(String(input)).pathname;
    if (path === "/workers/ack") {
      single++;
      await new Promise((r) => setTimeout(r, 500)); // the others finish meanwhile and queue up
    }
    const resp = await fetch(input, init);
    if (path === "/workers/ack/batch" && typeof init?.body === "string") {
      const n = (JSON.parse(init.body) as { acks: unknown[] }).acks.length;
      batches.push({ n, prefer: new Headers(init.headers).get("prefer"), applied: resp.headers.get("preference-applied") });
    }
    return resp;
  };
  // Results over the 16 KiB a poll may carry per ack, so that no ack rides on a poll.
  const big = "x".repeat(20 << 10);
  const tasks = await client.enqueueBatch(q, Array.from({ length: 4 }, (_, n) => ({ payload: { n } })));
  const w = new Worker(new Client(url, { fetch: slowAcks }), { concurrency: 4, pollWaitMs: 1_000, shutdownGraceMs: 1_000, logger: logger() });
  w.handle(q, async (job) => {
    const { n } = job.payload as { n: number };
    if (n > 0) await new Promise((r) => setTimeout(r, 150));
    return { n, big };
  });
  const r = start(w);
  const done = await waitAll(q, tasks.map((t) => t.id), "done");
  await r.stop();
  done.forEach((t, n) => assert.deepEqual(t.result, { n, big }));
  assert.ok(batches.length > 0, `no batched ack (${single} single acks)`);
  assert.equal(single + batches.reduce((a, b) => a + b.n, 0), 4, "each task acked once");
  assert.ok(batches.every((b) => b.n > 1 && b.prefer === "return=minimal" && b.applied === "return=minimal"), JSON.stringify(batches));
});

test("retry after a delay, permanent failure, snooze without spending a retry", async () => {
  const q = await freshQueue("outcomes", { max_retries: 1 });
  const [retried, perm, snoozed] = await client.enqueueBatch(q, [
    { payload: "retry" }, { payload: "permanent" }, { payload: "snooze", max_retries: 0 },
  ]);
  const w = worker({ concurrency: 3 }).handle(q, (job) => {
    if (job.attempt === 1 && job.payload === "retry") throw retryAfter(new Error("flaky upstream"), 300);
    if (job.payload === "permanent") throw new PermanentError("bad payload");
    if (job.payload === "snooze" && job.attempt === 1) throw snooze(300);
    return "ok";
  });
  const r = start(w);
  const [rt, st] = await waitAll(q, [retried!.id, snoozed!.id], "done");
  const [pt] = await waitAll(q, [perm!.id], "dead");
  await r.stop();

  const [a1, a2] = rt!.attempt_history!;
  assert.equal(a1!.status, "failed");
  assert.equal(a1!.error, "flaky upstream");
  assert.equal(a2!.status, "succeeded");
  assert.ok(Date.parse(a2!.started_at) - Date.parse(a1!.finished_at!) >= 300, "the retry waited its retry_after_ms");

  assert.deepEqual(pt!.attempt_history!.map((a) => [a.status, a.error]), [["failed", "bad payload"]]);

  assert.deepEqual(st!.attempt_history!.map((a) => a.status), ["released", "succeeded"]);
  assert.match(st!.attempt_history![0]!.error!, /^snoozed for 300 ms by worker /);
  assert.equal(st!.releases, 1);
  assert.ok(Date.parse(st!.attempt_history![1]!.started_at) - Date.parse(st!.attempt_history![0]!.finished_at!) >= 300);
});

test("a cancel reaches the handler through job.signal and ends the task cancelled", async () => {
  const q = await freshQueue("cancel");
  const t = await client.enqueue(q, { payload: null });
  let reason: unknown;
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  const w = worker().handle(q, async (job) => {
    started();
    await new Promise((r) => job.signal.addEventListener("abort", r, { once: true }));
    reason = job.signal.reason;
    throw job.signal.reason;
  });
  const r = start(w);
  await running;
  const c = await client.cancelTask(q, t.id);
  assert.equal(c.cancel_requested, true);
  const [end] = await waitAll(q, [t.id], "cancelled", 30_000);
  await r.stop();
  assert.ok(reason instanceof TaskCancelledError, String(reason));
  assert.deepEqual(end!.attempt_history!.map((a) => a.status), ["cancelled"]);
});

test("shutdown releases the tasks in hand without spending their budget", async () => {
  const q = await freshQueue("shutdown", { max_retries: 0 });
  const t = await client.enqueue(q, { payload: "long" });
  let reason: unknown;
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  const w = worker({ shutdownGraceMs: 200 }).handle(q, async (job) => {
    started();
    await new Promise((r) => job.signal.addEventListener("abort", r, { once: true }));
    reason = job.signal.reason;
  });
  const r = start(w);
  await running;
  const t0 = Date.now();
  await r.stop();
  assert.ok(Date.now() - t0 < 3_000, "run returned soon after its grace");
  assert.ok(reason instanceof WorkerStoppingError);
  const back = await client.getTask(q, t.id);
  assert.ok(back.status === "pending" || back.status === "claimed", back.status);
  assert.equal(back.releases, 1);
  assert.deepEqual(back.attempt_history!.map((a) => a.status), ["released"]);

  // With max_retries 0 the task still runs again: the release spent nothing.
  const r2 = start(worker().handle(q, () => "second"));
  const [end] = await waitAll(q, [t.id], "done");
  await r2.stop();
  assert.deepEqual(end!.attempt_history!.map((a) => a.status), ["released", "succeeded"]);
  assert.equal(end!.result, "second");
});

test("heartbeats keep a task's lease past its length; progress shows on the task", async (t) => {
  const lease = await leaseMs();
  if (lease > 5_000) {
    t.skip(`the server's lease is ${lease} ms; run against a short lease (taskforge serve --lease-timeout 2s)`);
    return;
  }
  const q = await freshQueue("heartbeat");
  const task = await client.enqueue(q, { payload: null });
  const w = worker().handle(q, async (job) => {
    await job.progress({ step: 1 });
    await new Promise((r) => setTimeout(r, lease * 1.5 + 1_000));
    return "kept";
  });
  const r = start(w);
  const [end] = await waitAll(q, [task.id], "done");
  await r.stop();
  assert.deepEqual(end!.progress, { step: 1 });
  const [a] = end!.attempt_history!;
  assert.equal(end!.attempt_history!.length, 1);
  assert.equal(a!.status, "succeeded");
  assert.ok(Date.parse(a!.finished_at!) - Date.parse(a!.started_at) > lease, "the attempt outlived one lease");
});

test("a task's timeout_seconds aborts job.signal with a TaskTimeoutError", async () => {
  const q = await freshQueue("timeout", { max_retries: 0 });
  const t = await client.enqueue(q, { payload: null, timeout_seconds: 1 });
  let reason: unknown;
  let aborted!: () => void;
  const gotAbort = new Promise<void>((r) => (aborted = r));
  const began = Date.now();
  let after = 0;
  const w = worker().handle(q, async (job) => {
    await new Promise((r) => job.signal.addEventListener("abort", r, { once: true }));
    reason = job.signal.reason;
    after = Date.now() - began;
    aborted();
    throw reason;
  });
  const r = start(w);
  await gotAbort;
  await r.stop();
  assert.ok(reason instanceof TaskTimeoutError, String(reason));
  assert.ok(after >= 900 && after < 5_000, `aborted after ${after} ms`);
  // The server ends the attempt timed_out by itself (the lease never outlives the
  // timeout), so the nack may come too late; either way the task does not succeed.
  assert.notEqual((await client.getTask(q, t.id)).status, "done");
});

test("an unreachable server: polls back off and retry, and a stop still ends run at once", async () => {
  const log = logger();
  const w = new Worker(new Client("http://127.0.0.1:9"), { retryMinMs: 20, retryMaxMs: 100, logger: log }).handle("q", () => undefined);
  const ac = new AbortController();
  const running = w.run(ac.signal);
  await eventually("a few polls failed", 5_000, () => log.lines.filter((l) => l.includes("poll failed; retrying")).length >= 3);
  const t0 = Date.now();
  ac.abort();
  await running;
  assert.ok(Date.now() - t0 < 500, "run returned at once");
  assert.match(log.lines[0]!, /unavailable: server unreachable/);
});

test("run rejects a poll the server refuses as invalid, and a worker without handlers", async () => {
  await assert.rejects(worker().run(new AbortController().signal), /no handlers/);
  const w = worker().handle("not a valid name!", () => undefined);
  await assert.rejects(w.run(new AbortController().signal), /invalid_request/);
  await eventually("the worker is idle again", 1_000, () => {
    try {
      w.handle("other", () => undefined);
      return true;
    } catch {
      return false;
    }
  });
});
