// The producer client against a real server: every call once, and the errors.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, TaskForgeError, isErrorCode } from "../src/index.js";
import { client, freshQueue } from "./helpers.js";

/** Asserts that p rejects with a TaskForgeError of that code and status. */
async function rejectsWith(p: Promise<unknown>, code: string, status: number): Promise<TaskForgeError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof TaskForgeError, `want a TaskForgeError, got ${String(e)}`);
    assert.equal(e.code, code);
    assert.equal(e.status, status);
    return e;
  }
  assert.fail(`want ${code}, got success`);
}

/** A dead task of queue q: claimed and nacked as permanent through the worker protocol. */
async function deadTask(q: string, payload: unknown): Promise<string> {
  const t = await client.enqueue(q, { payload });
  const { tasks } = await client.poll({ worker_id: "ts-client-test", queues: [q], wait_ms: 5_000 });
  const got = tasks.find((x) => x.id === t.id);
  assert.ok(got, "the enqueued task was polled");
  const nacked = await client.nack({ worker_id: "ts-client-test", task_id: got.id, lease_token: got.lease_token, error: "boom", retryable: false });
  assert.equal(nacked.status, "dead");
  return t.id;
}

test("queues: create, get, list, update, pause, resume, stats, delete", async () => {
  const q = await freshQueue("queues", { max_retries: 5, backoff_base_ms: 500 });
  const got = await client.getQueue(q);
  assert.equal(got.max_retries, 5);
  assert.equal(got.backoff_base_ms, 500);
  assert.ok((await client.listQueues()).some((x) => x.name === q));
  const upd = await client.updateQueue(q, { rate_limit: 10, max_concurrency: 2 });
  assert.equal(upd.rate_limit, 10);
  assert.equal(upd.rate_burst, 10);
  assert.equal(upd.max_concurrency, 2);
  assert.equal((await client.updateQueue(q, { rate_limit: null, max_concurrency: null })).rate_limit, null);
  assert.equal((await client.pauseQueue(q)).paused, true);
  assert.equal((await client.resumeQueue(q)).paused, false);
  const st = await client.stats(q);
  assert.equal(st.queue, q);
  assert.equal(st.depth.pending, 0);
  await rejectsWith(client.createQueue(q), "queue_exists", 409);
  await rejectsWith(client.updateQueue(q, { max_retries: 1000 }), "invalid_request", 400);
  await client.deleteQueue(q);
  const e = await rejectsWith(client.getQueue(q), "queue_not_found", 404);
  assert.match(e.message, /^get queue ".*": queue_not_found: /);
  assert.ok(isErrorCode(e, "queue_not_found"));
});

test("tasks: enqueue, idempotency, batch, get with wait, list, cancel, bulk cancel", async () => {
  const q = await freshQueue("tasks");
  const a = await client.enqueue(q, { payload: { n: 1 }, priority: 2, idempotency_key: "k1", timeout_seconds: 60 });
  assert.equal(a.status, "pending");
  assert.deepEqual(a.payload, { n: 1 });
  assert.equal(a.priority, 2);
  assert.equal((await client.enqueue(q, { payload: { n: 1 }, priority: 2, idempotency_key: "k1", timeout_seconds: 60 })).id, a.id);
  await rejectsWith(client.enqueue(q, { payload: { n: 2 }, idempotency_key: "k1" }), "idempotency_conflict", 409);

  const later = new Date(Date.now() + 3_600_000);
  const batch = await client.enqueueBatch(q, [{ payload: 1 }, { payload: null, scheduled_at: later }, { payload: "x" }]);
  assert.deepEqual(batch.map((t) => t.payload), [1, null, "x"]);
  assert.equal(Date.parse(batch[1]!.scheduled_at), later.getTime());

  const got = await client.getTask(q, a.id);
  assert.deepEqual(got.attempt_history, []);
  const t0 = Date.now();
  const waited = await client.getTask(q, a.id, { waitMs: 300 });
  assert.ok(Date.now() - t0 >= 250, "a wait on an unfinished task lasts its wait_ms");
  assert.ok(waited.status === "pending" || waited.status === "claimed", waited.status);

  const page = await client.listTasks(q, { limit: 2 });
  assert.equal(page.tasks.length, 2);
  assert.ok(page.next_cursor);
  const all: string[] = [];
  for await (const t of client.allTasks(q, { limit: 2 })) all.push(t.id);
  assert.equal(all.length, 4);
  assert.equal(new Set(all).size, 4);

  const cancelled = await client.cancelTask(q, a.id);
  assert.equal(cancelled.status, "cancelled");
  const done = await client.waitTask(q, a.id, { timeoutMs: 1_000 });
  assert.equal(done.status, "cancelled");
  await rejectsWith(client.cancelTask(q, a.id), "task_not_cancellable", 409);
  assert.deepEqual(await client.cancelTasks(q, [batch[0]!.id, a.id]), { cancelled: 1, cancel_requested: 0 });
  assert.deepEqual(await client.cancelByStatus(q, "pending"), { cancelled: 2, cancel_requested: 0 });
  await rejectsWith(client.getTask(q, "01a2322c-0000-7000-8000-000000000000"), "task_not_found", 404);
  await rejectsWith(client.listTasks(q, { limit: 501 }), "invalid_request", 400);
});

test("dead-letter queue: list, replay, bulk replay, discard, bulk discard", async () => {
  const q = await freshQueue("dlq");
  const d1 = await deadTask(q, { d: 1 });
  const d2 = await deadTask(q, { d: 2 });
  const d3 = await deadTask(q, { d: 3 });
  const dead = await client.listDead(q, { limit: 10 });
  assert.deepEqual(dead.tasks.map((t) => t.id).sort(), [d1, d2, d3].sort());
  assert.ok(dead.tasks.every((t) => typeof t.died_at === "string"));
  const seen: string[] = [];
  for await (const t of client.allDead(q, 2)) seen.push(t.id);
  assert.equal(seen.length, 3);

  const r1 = await client.replayDead(q, d1);
  assert.equal(r1.replayed_from, d1);
  assert.equal(r1.status, "pending");
  const rs = await client.replayDeadTasks(q, [d2, d3]);
  assert.deepEqual(rs.map((t) => t.replayed_from), [d2, d3]);
  assert.equal((await client.replayAllDead(q)).length, 3);
  assert.equal((await client.getTask(q, d1)).replay_count, 2);

  await client.discardDead(q, d1);
  await rejectsWith(client.discardDead(q, d1), "task_not_found", 404);
  assert.equal(await client.discardDeadTasks(q, [d2, d1]), 1);
  assert.equal(await client.discardAllDead(q), 1);
  assert.equal((await client.listDead(q)).tasks.length, 0);
});

test("schedules: create, get, list, update, trigger, delete", async () => {
  const q = await freshQueue("sched");
  const name = `${q}-nightly`;
  const s = await client.createSchedule(name, { queue: q, cron: "30 2 * * *", timezone: "Europe/Berlin", payload: { report: "daily" } });
  assert.equal(s.queue, q);
  assert.equal(s.timezone, "Europe/Berlin");
  assert.ok(s.next_run_at);
  await rejectsWith(client.createSchedule(name, { queue: q, cron: "@daily", payload: 1 }), "schedule_exists", 409);
  await rejectsWith(client.createSchedule(`${name}-bad`, { queue: q, cron: "not cron", payload: 1 }), "invalid_request", 400);
  assert.equal((await client.getSchedule(name)).cron, "30 2 * * *");
  assert.deepEqual((await client.listSchedules(q)).map((x) => x.name), [name]);
  const paused = await client.updateSchedule(name, { paused: true, max_retries: 2 });
  assert.equal(paused.paused, true);
  assert.equal(paused.max_retries, 2);
  const t = await client.triggerSchedule(name);
  assert.equal(t.schedule, name);
  assert.deepEqual(t.payload, { report: "daily" });
  await client.deleteSchedule(name);
  await rejectsWith(client.getSchedule(name), "schedule_not_found", 404);
});

test("errors: an unreachable server is unavailable with status 0; an aborted call throws the signal's reason", async () => {
  const dead = new Client("http://127.0.0.1:9");
  const e = await rejectsWith(dead.listQueues(), "unavailable", 0);
  assert.ok(e.temporary);
  assert.match(e.message, /^list queues: unavailable: server unreachable/);

  const q = await freshQueue("abort");
  const t = await client.enqueue(q, { payload: 1 });
  const ac = new AbortController();
  const why = new Error("caller gave up");
  setTimeout(() => ac.abort(why), 100);
  await assert.rejects(client.getTask(q, t.id, { waitMs: 5_000, signal: ac.signal }), (err: unknown) => err === why);

  assert.throws(() => new Client("ftp://x"), TypeError);
  await rejectsWith(client.request("route", "GET", "/no/such/route"), "not_found", 404);
});
