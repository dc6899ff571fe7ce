// graphile-worker and BullMQ, the Node.js queues the TypeScript SDK is compared
// with, on TaskForge's benchmark workloads: E1 (no-op tasks enqueued first, then
// drained by 1, 16 and 100 concurrent handlers), E1 preload (one client's batch
// enqueues), E2 (50 ms tasks, 16 handlers), latency (enqueue → handler start at
// 100 tasks/s) and one enqueue's round trip. Same flags and JSON report as the
// Go peers program (internal/bench/peers), so that `taskforge bench compare
// --languages typescript` reads both alike.
//
// Handlers run in this process, as both systems run them; throughput is tasks
// over the span from the first handler's start to the last handler's return,
// latency is enqueue → handler start on this process's clock. Each system runs
// with its documented fast settings: graphile-worker with its local queue
// (size 500) and batched completions (completeJobBatchDelay 0, as its
// performance page), BullMQ with removeOnComplete. graphile-worker gets a
// database of its own, created and dropped; BullMQ a key prefix of its own,
// deleted after.
//
//   node peers.mjs --database-url URL --redis-addr HOST:PORT [--systems graphile-worker,bullmq] ...

import { parseArgs } from "node:util";
import { writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import pg from "pg";
import { Logger, run, makeWorkerUtils } from "graphile-worker";
import { Queue, Worker } from "bullmq";

const { values: flags } = parseArgs({
  options: {
    "database-url": { type: "string", default: "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" },
    "redis-addr": { type: "string", default: "127.0.0.1:6379" },
    systems: { type: "string", default: "graphile-worker,bullmq" },
    workloads: { type: "string", default: "e1,e1-preload,e2,latency,enqueue" },
    workers: { type: "string", default: "1,16,100" },
    tasks: { type: "string", default: "20000" },
    "sleep-tasks": { type: "string", default: "1600" },
    "latency-tasks": { type: "string", default: "1000" },
    "enqueue-tasks": { type: "string", default: "1000" },
    runs: { type: "string", default: "3" },
    json: { type: "string", default: "" },
  },
});
const cfg = {
  databaseURL: flags["database-url"],
  redisAddr: flags["redis-addr"],
  systems: flags.systems.split(","),
  workloads: flags.workloads.split(","),
  workers: flags.workers.split(",").map(Number),
  tasks: Number(flags.tasks),
  sleepTasks: Number(flags["sleep-tasks"]),
  latTasks: Number(flags["latency-tasks"]),
  rtTasks: Number(flags["enqueue-tasks"]),
  runs: Number(flags.runs),
};
for (const [name, v] of Object.entries(cfg)) {
  if (typeof v === "number" && !(v >= 1)) fail(`--${name}: want a positive count`);
}
if (cfg.workers.some((w) => !(w >= 1))) fail("--workers: want positive counts");

function fail(msg) {
  console.error(msg);
  process.exit(2);
}

const now = () => performance.timeOrigin + performance.now(); // ms, sub-ms precision
const BATCH = 1000;

/** A drain's span: first handler start to last handler return; resolves once n returned. */
function span(n) {
  let first = 0, last = 0, returned = 0, resolve;
  const done = new Promise((r) => (resolve = r));
  return {
    start() { if (!first) first = now(); },
    end() {
      last = now();
      if (++returned === n) resolve();
    },
    async wait() {
      await withTimeout(done, 600_000, `drain of ${n} tasks did not finish`);
      return n / ((last - first) / 1000);
    },
  };
}

/** Each task's enqueue → handler start; resolves once n arrived. */
function latencies(n) {
  const got = [];
  let resolve;
  const done = new Promise((r) => (resolve = r));
  return {
    received(sentAt) {
      got.push(now() - sentAt);
      if (got.length === n) resolve();
    },
    async wait() {
      await withTimeout(done, 60_000, `only ${got.length} of ${n} tasks arrived`);
      return got;
    },
  };
}

async function withTimeout(p, ms, msg) {
  let t;
  try {
    return await Promise.race([p, new Promise((_, rej) => (t = setTimeout(() => rej(new Error(msg)), ms)))]);
  } finally {
    clearTimeout(t);
  }
}

/** Calls send n times at rate per second, on a schedule that does not drift. */
async function pace(n, rate, send) {
  const t0 = now();
  for (let i = 0; i < n; i++) {
    const d = t0 + (i * 1000) / rate - now();
    if (d > 0) await new Promise((r) => setTimeout(r, d));
    await send();
  }
}

async function timeEach(n, f) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const t0 = now();
    await f();
    out.push(now() - t0);
  }
  return out;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// --- the systems ---------------------------------------------------------------------

/**
 * The workloads on one system, which gives: reset(), addMany(n, data) (batched),
 * addOne(data), and start(workers, handler) that runs handler(data) for each task
 * on `workers` concurrent handlers and resolves to something with stop().
 */
class Peer {
  async drain(n, workers, sleepMs) {
    await this.reset();
    await this.addMany(n, { sleep_ms: sleepMs });
    const sp = span(n);
    const r = await this.start(workers, async (data) => {
      sp.start();
      if (data.sleep_ms > 0) await sleep(data.sleep_ms);
      sp.end();
    });
    try {
      return await sp.wait();
    } finally {
      await r.stop();
    }
  }

  async preload(n) {
    await this.reset();
    const t0 = now();
    await this.addMany(n, {});
    return n / ((now() - t0) / 1000);
  }

  async latency(n, workers, rate) {
    await this.reset();
    const l = latencies(n);
    const r = await this.start(workers, async (data) => l.received(data.sent_at));
    try {
      await pace(n, rate, () => this.addOne({ sent_at: now() }));
      return await l.wait();
    } finally {
      await r.stop();
    }
  }

  async roundTrips(n) {
    await this.reset();
    return timeEach(n, () => this.addOne({}));
  }
}

class Graphile extends Peer {
  static async open(serverURL) {
    const g = new Graphile();
    g.admin = new pg.Client({ connectionString: serverURL });
    await g.admin.connect();
    g.dbName = `peers_graphile_${process.pid}`;
    await g.admin.query(`CREATE DATABASE ${g.dbName}`);
    const u = new URL(serverURL);
    u.pathname = "/" + g.dbName;
    // One pool of ours for the utils and every runner, ended before the
    // database is dropped (a pool of graphile-worker's own could still hold a
    // connection that the drop terminates, an unhandled error).
    g.pool = new pg.Pool({ connectionString: u.toString(), max: 110 });
    g.pool.on("error", () => {});
    g.utils = await makeWorkerUtils({ pgPool: g.pool, logger: quietLogger });
    await g.utils.migrate();
    return g;
  }

  async reset() {
    await this.utils.withPgClient((c) => c.query("TRUNCATE graphile_worker._private_jobs CASCADE"));
  }

  async addMany(n, payload) {
    for (let left = n; left > 0; left -= BATCH) {
      await this.utils.addJobs(Array.from({ length: Math.min(left, BATCH) }, () => ({ identifier: "bench", payload })));
    }
  }

  addOne(payload) {
    return this.utils.addJob("bench", payload);
  }

  start(workers, handler) {
    return run({
      pgPool: this.pool,
      concurrency: workers,
      noHandleSignals: true,
      pollInterval: 1000,
      taskList: { bench: (payload) => handler(payload) },
      logger: quietLogger,
      preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
    });
  }

  async close() {
    await this.utils?.release();
    await this.pool?.end();
    await this.admin.query(`DROP DATABASE IF EXISTS ${this.dbName} WITH (FORCE)`);
    await this.admin.end();
  }
}

const quietLogger = new Logger(() => () => {});

class BullMQ extends Peer {
  static async open(redisAddr) {
    const b = new BullMQ();
    const [host, port] = redisAddr.split(":");
    b.connection = { host, port: Number(port), maxRetriesPerRequest: null };
    b.prefix = `peers-bullmq-${process.pid}`;
    b.name = "bench";
    b.queue = new Queue(b.name, { connection: b.connection, prefix: b.prefix });
    await b.queue.waitUntilReady();
    return b;
  }

  async reset() {
    await this.queue.obliterate({ force: true });
  }

  async addMany(n, data) {
    for (let left = n; left > 0; left -= BATCH) {
      await this.queue.addBulk(Array.from({ length: Math.min(left, BATCH) }, () => (
        { name: "bench", data, opts: { removeOnComplete: true, removeOnFail: true } })));
    }
  }

  addOne(data) {
    return this.queue.add("bench", data, { removeOnComplete: true });
  }

  async start(workers, handler) {
    const w = new Worker(this.name, (job) => handler(job.data),
      { connection: this.connection, prefix: this.prefix, concurrency: workers });
    await w.waitUntilReady();
    return { stop: () => w.close() };
  }

  async close() {
    await this.reset();
    await this.queue.close();
  }
}

// --- the workloads -----------------------------------------------------------------

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return 0;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const percentile = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(((s.length - 1) * p) / 100)] : 0;
};

async function runAll(sys, name) {
  const has = (w) => cfg.workloads.includes(w);
  const accs = [];
  const add = (res) => {
    const a = { res, rate: [], lat: [] };
    accs.push(a);
    return a;
  };
  const e1 = has("e1") ? cfg.workers.map((w) => add({ system: name, workload: "e1", workers: w, tasks: cfg.tasks })) : [];
  const preload = has("e1-preload") && add({ system: name, workload: "e1-preload", tasks: cfg.tasks });
  const e2 = has("e2") && add({ system: name, workload: "e2", workers: 16, tasks: cfg.sleepTasks });
  const lat = has("latency") && add({ system: name, workload: "latency", workers: 16, tasks: cfg.latTasks });
  const rt = has("enqueue") && add({ system: name, workload: "enqueue", tasks: cfg.rtTasks });
  // Run by run, so that noise spreads over every workload.
  for (let run = 1; run <= cfg.runs; run++) {
    for (const a of e1) {
      const v = await sys.drain(cfg.tasks, a.res.workers, 0);
      a.rate.push(v);
      console.error(`${name} run ${run}: e1 ${a.res.workers} workers ${v.toFixed(0)} tasks/s`);
    }
    if (preload) preload.rate.push(await sys.preload(cfg.tasks));
    if (e2) e2.rate.push(await sys.drain(cfg.sleepTasks, 16, 50));
    if (lat) lat.lat.push(await sys.latency(cfg.latTasks, 16, 100));
    if (rt) rt.lat.push(await sys.roundTrips(cfg.rtTasks));
  }
  return accs.map((a) => {
    const r = { ...a.res, runs: cfg.runs };
    if (a.rate.length) r.per_sec = median(a.rate);
    if (a.lat.length) {
      r.p50_ms = median(a.lat.map((d) => percentile(d, 50)));
      r.p95_ms = median(a.lat.map((d) => percentile(d, 95)));
      r.p99_ms = median(a.lat.map((d) => percentile(d, 99)));
    }
    return r;
  });
}

const report = {
  started_at: new Date().toISOString(),
  machine: `${cpus().length} CPUs, load ${loadavg().map((l) => l.toFixed(2)).join(" ")}`,
  results: [],
};
let current;
process.once("SIGINT", async () => {
  // Interrupted: drop graphile-worker's database, delete BullMQ's keys, then exit.
  try {
    await current?.close();
  } finally {
    process.exit(130);
  }
});
for (const name of cfg.systems) {
  if (name === "graphile-worker") current = await Graphile.open(cfg.databaseURL);
  else if (name === "bullmq") current = await BullMQ.open(cfg.redisAddr);
  else fail(`--systems: unknown system ${name} (graphile-worker, bullmq)`);
  try {
    report.results.push(...(await runAll(current, name)));
  } finally {
    await current.close();
    current = undefined;
  }
}
for (const r of report.results) {
  console.log([r.system.padEnd(16), r.workload.padEnd(11), String(r.workers ?? "").padStart(7), String(r.tasks).padStart(7),
    (r.per_sec ?? 0).toFixed(0).padStart(10), ...[r.p50_ms, r.p95_ms, r.p99_ms].map((v) => (v ?? 0).toFixed(2).padStart(8))].join(" "));
}
if (flags.json) writeFileSync(flags.json, JSON.stringify(report, null, 2) + "\n");
process.exit(0);
