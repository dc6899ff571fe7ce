// The producer client against a real server: every call once, and the errors.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, TaskForgeError, isErrorCode } from "../src/index.js";
import { client, eventually, freshQueue, url } from "./helpers.js";

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
  // Retention: the server's defaults, then the ages set, then the defaults again.
  const week = 7 * 24 * 3_600_000;
  assert.deepEqual(got.retention, { done_ms: week, cancelled_ms: week, dead_ms: null });
  const kept = await client.updateQueue(q, { retention: { done_ms: 3_600_000, dead_ms: 30 * 24 * 3_600_000 } });
  assert.deepEqual(kept.retention, { done_ms: 3_600_000, cancelled_ms: week, dead_ms: 30 * 24 * 3_600_000 });
  assert.deepEqual((await client.updateQueue(q, { retention: { cancelled_ms: null } })).retention,
    { done_ms: 3_600_000, cancelled_ms: null, dead_ms: 30 * 24 * 3_600_000 });
  await rejectsWith(client.updateQueue(q, { retention: { done_ms: 1_000 } }), "invalid_request", 400);
  assert.deepEqual((await client.updateQueue(q, { retention: null })).retention, { done_ms: week, cancelled_ms: week, dead_ms: null });
  await client.deleteQueue(q);
  const e = await rejectsWith(client.getQueue(q), "queue_not_found", 404);
  assert.match(e.message, /^get queue ".*": queue_not_found: /);
  assert.ok(isErrorCode(e, "queue_not_found"));
});

test("tasks: enqueue, idempotency, batch, get with wait, list, cancel, bulk cancel", async () => {
  const q = await freshQueue("tasks");
  const a = await client.enqueue(q, { payload: { n: 1 }, priority: 2, idempotency_key: "k1", timeout_seconds: 60 });
  // A task due now may go into the dispatch buffer with the enqueue's own commit (docs/api.md).
  assert.ok(a.status === "pending" || a.status === "claimed", a.status);
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

test("debounce: a second enqueue with the key replaces the waiting task; bad combinations are invalid_request", async () => {
  const q = await freshQueue("debounce");
  const a = await client.enqueue(q, { payload: { rev: 1 }, debounce_key: "doc-1", debounce_ms: 60_000 });
  assert.equal(a.status, "pending");
  assert.equal(a.debounce_key, "doc-1");
  assert.equal(a.debounced, 0);
  assert.equal(Date.parse(a.scheduled_at) - Date.parse(a.created_at), 60_000);
  const b = await client.enqueue(q, { payload: { rev: 2 }, priority: 1, debounce_key: "doc-1", debounce_ms: 60_000, debounce_max_ms: 600_000 });
  assert.equal(b.id, a.id);
  assert.equal(b.debounced, 1);
  assert.deepEqual(b.payload, { rev: 2 });
  const [c, d] = await client.enqueueBatch(q, [{ payload: 3, debounce_key: "doc-1", debounce_ms: 1_000 }, { payload: 4 }]);
  assert.equal(c!.id, a.id);
  assert.equal(c!.debounced, 2);
  assert.equal(d!.debounce_key, null);
  assert.equal((await client.getTask(q, a.id)).debounced, 2);
  await rejectsWith(client.enqueue(q, { payload: 5, debounce_key: "doc-1" }), "invalid_request", 400);
  await rejectsWith(client.enqueue(q, { payload: 5, debounce_key: "doc-1", debounce_ms: 1_000, idempotency_key: "i" }), "invalid_request", 400);
  await rejectsWith(client.enqueue(q, { payload: 5, debounce_key: "doc-1", debounce_ms: 1_000, debounce_max_ms: 999 }), "invalid_request", 400);
  assert.equal((await client.getQueue(q)).idempotency_window_ms, 86_400_000);
  assert.equal((await client.updateQueue(q, { idempotency_window_ms: 3_600_000 })).idempotency_window_ms, 3_600_000);
  await rejectsWith(client.updateQueue(q, { idempotency_window_ms: -1 }), "invalid_request", 400);
});

test("minimal answers: enqueueBatchMinimal returns the ids in order; ackBatchMinimal acks without tasks, a stale lease is lease_lost", async () => {
  const q = await freshQueue("minimal");
  // A client that records each batch request's Prefer header and the answer's Preference-Applied.
  const seen: { path: string; prefer: string | null; applied: string | null }[] = [];
  const recording: typeof fetch = async (input, init) => {
    const resp = await fetch(input, init);
    const path = new URL(String(input)).pathname;
    if (path.endsWith("/batch")) seen.push({ path, prefer: new Headers(init?.headers).get("prefer"), applied: resp.headers.get("preference-applied") });
    return resp;
  };
  const mc = new Client(url, { token: process.env["TASKFORGE_TOKEN"], fetch: recording });

  const later = new Date(Date.now() + 3_600_000);
  const sent = [
    { payload: { n: 0 } }, { payload: null }, { payload: "two", priority: 2 }, { payload: [3, 3, 3], max_retries: 7 },
    { payload: { n: 4 }, idempotency_key: "min-4" }, { payload: 5, scheduled_at: later },
  ];
  const ids = await mc.enqueueBatchMinimal(q, sent);
  assert.equal(ids.length, sent.length);
  assert.equal(new Set(ids).size, sent.length);
  assert.ok(ids.every((id) => /^[0-9a-f-]{36}$/.test(id)), ids.join(" "));
  for (const [i, id] of ids.entries()) {
    const t = await client.getTask(q, id);
    assert.equal(t.id, id);
    assert.deepEqual(t.payload, sent[i]!.payload, `tasks[${i}]`);
  }
  assert.equal((await client.getTask(q, ids[2]!)).priority, 2);
  assert.equal((await client.getTask(q, ids[3]!)).max_retries, 7);
  assert.equal((await client.getTask(q, ids[4]!)).idempotency_key, "min-4");
  assert.equal(Date.parse((await client.getTask(q, ids[5]!)).scheduled_at), later.getTime());
  assert.deepEqual(seen.splice(0), [{ path: `/queues/${q}/tasks/batch`, prefer: "return=minimal", applied: "return=minimal" }]);
  // The same validation as the full batch: nothing is enqueued.
  await rejectsWith(mc.enqueueBatchMinimal(q, [{ payload: 1 }, { payload: 2, priority: 11 }]), "invalid_request", 400);
  await rejectsWith(mc.enqueueBatchMinimal(`${q}-none`, [{ payload: 1 }]), "queue_not_found", 404);
  assert.equal((await client.listTasks(q)).tasks.length, sent.length);
  seen.length = 0;

  // Claim the five due tasks; the first one's lease then goes stale: released and claimed again.
  const wid = "ts-minimal";
  const claimed = new Map<string, string>(); // task id -> lease token
  await eventually("the five due tasks are claimed", 20_000, async () => {
    for (const t of (await client.poll({ worker_id: wid, queues: [q], max_tasks: 5, wait_ms: 1_000 })).tasks) claimed.set(t.id, t.lease_token);
    return claimed.size === 5;
  });
  assert.deepEqual([...claimed.keys()].sort(), ids.slice(0, 5).sort());
  const stale = ids[0]!;
  const staleToken = claimed.get(stale)!;
  await client.release({ worker_id: wid, task_id: stale, lease_token: staleToken });
  await eventually("the released task is claimed again", 20_000, async () => {
    for (const t of (await client.poll({ worker_id: wid, queues: [q], wait_ms: 1_000 })).tasks) claimed.set(t.id, t.lease_token);
    return claimed.get(stale) !== staleToken;
  });

  const acked = ids.slice(1, 5);
  const results = await mc.ackBatchMinimal(wid, [
    { task_id: acked[0]!, lease_token: claimed.get(acked[0]!)!, result: { ok: 1 } },
    { task_id: stale, lease_token: staleToken, result: "too late" },
    ...acked.slice(1).map((id, i) => ({ task_id: id, lease_token: claimed.get(id)!, ...(i === 0 ? {} : { result: { ok: i + 2 } }) })),
  ]);
  assert.deepEqual(seen.splice(0), [{ path: "/workers/ack/batch", prefer: "return=minimal", applied: "return=minimal" }]);
  assert.equal(results.length, 5);
  assert.deepEqual(results[1], { task_id: stale, error: { code: "lease_lost", message: results[1]!.error?.message } });
  assert.equal(typeof results[1]!.error?.message, "string");
  assert.deepEqual([results[0], ...results.slice(2)], acked.map((id) => ({ task_id: id })), "acked items are {task_id} alone");
  const done = await Promise.all(acked.map((id) => client.getTask(q, id)));
  assert.deepEqual(done.map((t) => t.status), ["done", "done", "done", "done"]);
  assert.deepEqual(done.map((t) => t.result), [{ ok: 1 }, null, { ok: 3 }, { ok: 4 }]);
  assert.ok(done.every((t) => t.attempt_history!.map((a) => a.status).join() === "succeeded"));

  // The refused ack changed nothing: the task is still executing under its new lease, which acks it.
  const held = await client.getTask(q, stale);
  assert.equal(held.status, "executing");
  assert.deepEqual(held.attempt_history!.map((a) => a.status), ["released", "executing"]);
  const [full] = await client.ackBatch(wid, [{ task_id: stale, lease_token: claimed.get(stale)!, result: "in time" }]);
  assert.equal(full!.task?.status, "done", "the full answer still carries the task");
  assert.equal((await client.getTask(q, stale)).result, "in time");
  // A whole-request error throws: nothing acked.
  await rejectsWith(mc.ackBatchMinimal(wid, []), "invalid_request", 400);
});

test("minimal answers: an answer with another count of ids or results throws invalid_response", async () => {
  const answering = (status: number, body: unknown): typeof fetch => async () =>
    new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", "Preference-Applied": "return=minimal" } });
  const short = new Client(url, { fetch: answering(201, { tasks: [{ id: "0193a1b2-0000-7000-8000-000000000001" }] }) });
  const e = await rejectsWith(short.enqueueBatchMinimal("q", [{ payload: 1 }, { payload: 2 }]), "invalid_response", 201);
  assert.match(e.message, /^enqueue 2 tasks into "q": invalid_response: server answered 1 ids for 2 tasks$/);
  const noId = new Client(url, { fetch: answering(201, { tasks: [{ id: "0193a1b2-0000-7000-8000-000000000001" }, {}] }) });
  await rejectsWith(noId.enqueueBatchMinimal("q", [{ payload: 1 }, { payload: 2 }]), "invalid_response", 201);
  const fewer = new Client(url, { fetch: answering(200, { results: [{ task_id: "a" }] }) });
  await rejectsWith(fewer.ackBatchMinimal("w", [{ task_id: "a", lease_token: "x" }, { task_id: "b", lease_token: "y" }]), "invalid_response", 200);
  // A server that ignores the preference answers the tasks anyway: they are left out.
  const full = new Client(url, { fetch: answering(200, { results: [{ task_id: "a", task: { id: "a", status: "done" } }] }) });
  assert.deepEqual(await full.ackBatchMinimal("w", [{ task_id: "a", lease_token: "x" }]), [{ task_id: "a" }]);
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

test("duplicate_request: the key of a discarded task stays reserved, and the error names the task", async () => {
  const q = await freshQueue("dup");
  const t = await client.enqueue(q, { payload: 1, idempotency_key: "order-7", max_retries: 0 });
  const { tasks } = await client.poll({ worker_id: "ts-client-test", queues: [q], wait_ms: 5_000 });
  const got = tasks.find((x) => x.id === t.id);
  assert.ok(got, "the enqueued task was polled");
  await client.nack({ worker_id: "ts-client-test", task_id: got.id, lease_token: got.lease_token, error: "boom", retryable: false });
  await client.discardDead(q, t.id);
  const e = await rejectsWith(client.enqueue(q, { payload: 1, idempotency_key: "order-7", max_retries: 0 }), "duplicate_request", 409);
  assert.equal(e.taskId, t.id);
  assert.ok(e.detail.includes(t.id));
  assert.ok(isErrorCode(e, "duplicate_request"));
  await client.enqueue(q, { payload: 1, idempotency_key: "other" });
  const c = await rejectsWith(client.enqueue(q, { payload: 2, idempotency_key: "other" }), "idempotency_conflict", 409);
  assert.equal(c.taskId, undefined);
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

test("groups: put, get, list with paging and active, tasks by group, delete", async () => {
  const q = await freshQueue("groups", { fairness: "round_robin", group_max_concurrency: 2, paused: true });
  await client.enqueueBatch(q, [{ payload: 1, group: "acme" }, { payload: 2, group: "acme" }, { payload: 3, group: "beta" }]);

  const acme = await client.getGroup(q, "acme");
  assert.equal(acme.group, "acme");
  assert.equal(acme.pending + acme.claimed, 2);
  assert.equal(acme.weight, null);
  assert.deepEqual(acme.effective, { weight: 1, max_concurrency: 2, rate_limit: null, rate_burst: null });

  const put = await client.putGroup(q, "acme", { weight: 3, rate_limit: 2 });
  assert.equal(put.weight, 3);
  assert.equal(put.max_concurrency, null);
  assert.deepEqual(put.effective, { weight: 3, max_concurrency: 2, rate_limit: 2, rate_burst: 2 });
  const idle = await client.putGroup(q, "idle", { max_concurrency: 5 });
  assert.equal(idle.effective.max_concurrency, 5);
  assert.equal(idle.pending, 0);

  const first = await client.listGroups(q, { limit: 2 });
  assert.deepEqual(first.groups.map((g) => g.group), ["acme", "beta"]);
  assert.ok(first.next_cursor);
  const second = await client.listGroups(q, { limit: 2, cursor: first.next_cursor });
  assert.deepEqual(second.groups.map((g) => g.group), ["idle"]);
  assert.equal(second.next_cursor, null);
  const all: string[] = [];
  for await (const g of client.allGroups(q, { limit: 1 })) all.push(g.group);
  assert.deepEqual(all, ["acme", "beta", "idle"]);
  assert.deepEqual((await client.listGroups(q, { active: true })).groups.map((g) => g.group), ["acme", "beta"]);

  const beta = await client.listTasks(q, { group: "beta" });
  assert.deepEqual(beta.tasks.map((t) => t.group), ["beta"]);

  await client.deleteGroup(q, "acme");
  const back = await client.getGroup(q, "acme");
  assert.equal(back.weight, null);
  assert.equal(back.effective.weight, 1);
  await client.deleteGroup(q, "idle");
  await rejectsWith(client.getGroup(q, "idle"), "group_not_found", 404);
  await rejectsWith(client.putGroup(q, "bad name"), "invalid_request", 400);
  await rejectsWith(client.putGroup(q, "acme", { weight: 0 }), "invalid_request", 400);
  await rejectsWith(client.getGroup(`${q}-none`, "acme"), "queue_not_found", 404);
});
