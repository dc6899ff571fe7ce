// E2 for the TypeScript worker beside the Go SDK's (`taskforge worker`), in one run,
// the way `taskforge bench` runs it (docs/benchmarks.md): start the layout's worker
// processes and wait until each has polled; drain 50 warm-up tasks through them;
// pause the queue, enqueue 1,000 tasks that sleep 50 ms, resume it, and wait until
// all are done. Throughput = tasks / (last finished_at − the resume), database
// clock; efficiency = throughput / (P × C × 1000 / sleep); worker CPU is the
// workers' user + system time from the resume to the end. Layout PxC is P
// processes with concurrency C each (1x16: one process running 16 at once; 16x1:
// sixteen running one each), +F sets the prefetch.
//
//   TASKFORGE_URL=… TASKFORGE_BIN=path/to/taskforge node dist/bench/e2.js [runs] [layout…]
//
// COUNT=1 makes each TypeScript worker print the requests it made, by path. Runs
// alternate Go and TypeScript, layout by layout, so that both see the same load.

import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client, type Task } from "../src/index.js";

const url = process.env["TASKFORGE_URL"] ?? "http://127.0.0.1:8080";
const bin = process.env["TASKFORGE_BIN"] ?? "taskforge";
const runs = Number(process.argv[2] ?? 2);
const layouts = process.argv.length > 3 ? process.argv.slice(3) : ["1x16"];
const N = Number(process.env["E2_TASKS"] ?? 1000);
const SLEEP = Number(process.env["E2_SLEEP_MS"] ?? 50);
const WARMUP = 50;
const tsWorker = join(dirname(fileURLToPath(import.meta.url)), "worker.js");
const c = new Client(url);

/** CPU seconds (user + system) of a process, from /proc. */
function cpuSeconds(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(f[11]) + Number(f[12])) / 100; // utime, stime in clock ticks (100 Hz)
}

async function until(what: string, cond: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + 120_000;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`${what}: not within 120 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function enqueue(q: string, n: number): Promise<void> {
  for (let i = 0; i < n; i += 1000) {
    await c.enqueueBatchMinimal(q, Array.from({ length: Math.min(1000, n - i) }, () => ({ payload: { ms: SLEEP } })));
  }
}

function startWorker(kind: "go" | "ts", q: string, id: string, conc: number, prefetch: string | undefined): ChildProcess {
  if (kind === "go") {
    return spawn(bin, ["worker", "--server", url, "--queue", `${q}=sleep`, "--concurrency", String(conc), "--worker-id", id,
      "--log-level", "warn", ...(prefetch !== undefined ? ["--prefetch", prefetch] : [])], { stdio: ["ignore", "ignore", "inherit"] });
  }
  return spawn(process.execPath, [tsWorker], {
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, TASKFORGE_URL: url, QUEUE: q, CONCURRENCY: String(conc), WORKER_ID: id, ...(prefetch !== undefined ? { PREFETCH: prefetch } : {}) },
  });
}

async function step(kind: "go" | "ts", layout: string): Promise<{ tps: number; cpu: number; ideal: number }> {
  const m = /^(\d+)x(\d+)(?:\+(\d+))?$/.exec(layout);
  if (!m) throw new Error(`layout ${layout}: want PROCSxCONCURRENCY[+PREFETCH]`);
  const procs = Number(m[1]);
  const conc = Number(m[2]);
  const q = `e2-${kind}-${Date.now().toString(36)}`;
  await c.createQueue(q);
  const ids = Array.from({ length: procs }, (_, i) => `${q}-w${i}`);
  const ps = ids.map((id) => startWorker(kind, q, id, conc, m[3]));
  await until("workers polling", async () => {
    const seen = new Set((await c.listWorkers()).map((w) => w.id));
    return ids.every((id) => seen.has(id));
  });
  await enqueue(q, WARMUP);
  await until("warm-up", async () => (await c.stats(q)).depth.done >= WARMUP);

  await c.pauseQueue(q);
  await enqueue(q, N);
  const cpu0 = ps.reduce((sum, p) => sum + cpuSeconds(p.pid!), 0);
  const resumedAt = Date.parse((await c.resumeQueue(q)).updated_at);
  await until("drain", async () => (await c.stats(q)).depth.done >= WARMUP + N);
  const cpu = ps.reduce((sum, p) => sum + cpuSeconds(p.pid!), 0) - cpu0;
  const done: Task[] = [];
  for await (const t of c.allTasks(q, { status: "done", limit: 500 })) done.push(t);
  const last = Math.max(...done.map((t) => Date.parse(t.finished_at!)));

  await Promise.all(ps.map((p) => {
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGTERM");
    return exited;
  }));
  await c.deleteQueue(q).catch(() => undefined);
  return { tps: N / ((last - resumedAt) / 1000), cpu, ideal: (procs * conc * 1000) / SLEEP };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
for (const layout of layouts) {
  const figures = { go: [] as number[], ts: [] as number[] };
  for (let r = 0; r < runs; r++) {
    for (const kind of ["go", "ts"] as const) {
      const la = loadavg()[0]!;
      const { tps, cpu, ideal } = await step(kind, layout);
      figures[kind].push(tps);
      console.log(`${layout} ${kind} run ${r + 1}: ${tps.toFixed(1)} tasks/s, efficiency ${((100 * tps) / ideal).toFixed(1)} %, ` +
        `worker CPU ${cpu.toFixed(2)} s per ${N} tasks, load ${la.toFixed(1)}`);
    }
  }
  console.log(`${layout} median: go ${median(figures.go).toFixed(1)}/s, ts ${median(figures.ts).toFixed(1)}/s, ts/go ${(median(figures.ts) / median(figures.go)).toFixed(3)}`);
}
