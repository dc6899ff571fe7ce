// E2 for the TypeScript worker beside the Go SDK's (`taskforge worker`), in one run:
// 1,000 tasks that sleep 50 ms are enqueued into a fresh queue, then worker
// processes drain them: layout PxC is P processes with concurrency C each (1x16:
// one process running 16 at once; 16x1: sixteen running one each). Throughput
// counts the tasks finished after the first 50 (warm-up), by their finished_at
// (database clock), as docs/benchmarks.md does; efficiency = throughput /
// (P × C × 1000 / sleep). Worker CPU is the workers' user + system time.
//
//   TASKFORGE_URL=… TASKFORGE_BIN=path/to/taskforge node dist/bench/e2.js [runs] [layout…]
//
// COUNT=1 makes each TypeScript worker print the requests it made, by path.
//
// Runs alternate Go and TypeScript, layout by layout, so that both see the same load.

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

async function drained(q: string): Promise<Task[]> {
  for (;;) {
    const st = await c.stats(q);
    if (st.depth.done >= N) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  const all: Task[] = [];
  for await (const t of c.allTasks(q, { status: "done", limit: 500 })) all.push(t);
  return all;
}

function throughput(tasks: Task[]): number {
  const ends = tasks.map((t) => Date.parse(t.finished_at!)).sort((a, b) => a - b);
  return (ends.length - 1 - WARMUP) / ((ends[ends.length - 1]! - ends[WARMUP]!) / 1000);
}

function startWorker(kind: "go" | "ts", q: string, conc: number, prefetch: string | undefined): ChildProcess {
  if (kind === "go") {
    return spawn(bin, ["worker", "--server", url, "--queue", `${q}=sleep`, "--concurrency", String(conc), "--log-level", "warn",
      ...(prefetch !== undefined ? ["--prefetch", prefetch] : [])], { stdio: ["ignore", "ignore", "inherit"] });
  }
  return spawn(process.execPath, [tsWorker], {
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, TASKFORGE_URL: url, QUEUE: q, CONCURRENCY: String(conc), ...(prefetch !== undefined ? { PREFETCH: prefetch } : {}) },
  });
}

async function step(kind: "go" | "ts", layout: string): Promise<{ tps: number; cpu: number; ideal: number }> {
  const m = /^(\d+)x(\d+)(?:\+(\d+))?$/.exec(layout);
  if (!m) throw new Error(`layout ${layout}: want PROCSxCONCURRENCY[+PREFETCH]`);
  const procs = Number(m[1]);
  const conc = Number(m[2]);
  const q = `e2-${kind}-${Date.now().toString(36)}`;
  await c.createQueue(q);
  for (let i = 0; i < N; i += 1000) {
    await c.enqueueBatch(q, Array.from({ length: Math.min(1000, N - i) }, () => ({ payload: { ms: SLEEP } })));
  }
  const ps = Array.from({ length: procs }, () => startWorker(kind, q, conc, m[3]));
  const tasks = await drained(q);
  const cpu = ps.reduce((sum, p) => sum + cpuSeconds(p.pid!), 0);
  await Promise.all(ps.map((p) => {
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGTERM");
    return exited;
  }));
  await c.deleteQueue(q).catch(() => undefined);
  return { tps: throughput(tasks), cpu, ideal: (procs * conc * 1000) / SLEEP };
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
