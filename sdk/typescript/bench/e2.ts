// E2 for the TypeScript worker beside the Go SDK's (`taskforge worker`), in one run:
// 1,000 tasks that sleep 50 ms are enqueued into a fresh queue, then one worker
// process with concurrency 16 drains them. Throughput counts the tasks finished
// after the first 50 (warm-up), by their finished_at (database clock), as
// docs/benchmarks.md does; efficiency = throughput / (concurrency × 1000 / sleep).
//
//   TASKFORGE_URL=… TASKFORGE_BIN=path/to/taskforge node dist/bench/e2.js [runs]
//
// Runs alternate Go, TypeScript, Go, TypeScript… so that both see the same load.

import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { Client, Worker, type Task } from "../src/index.js";

const url = process.env["TASKFORGE_URL"] ?? "http://127.0.0.1:8080";
const bin = process.env["TASKFORGE_BIN"] ?? "taskforge";
const runs = Number(process.argv[2] ?? 2);
const N = Number(process.env["E2_TASKS"] ?? 1000);
const SLEEP = Number(process.env["E2_SLEEP_MS"] ?? 50);
const CONC = Number(process.env["E2_CONCURRENCY"] ?? 16);
const WARMUP = 50;
const c = new Client(url);

/** CPU seconds (user + system) of a process, from /proc. */
function cpuSeconds(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(f[11]) + Number(f[12])) / 100; // utime, stime in clock ticks (100 Hz)
}

async function enqueue(q: string): Promise<void> {
  for (let i = 0; i < N; i += 1000) {
    await c.enqueueBatch(q, Array.from({ length: Math.min(1000, N - i) }, () => ({ payload: { ms: SLEEP } })));
  }
}

async function drained(q: string): Promise<Task[]> {
  for (;;) {
    const st = await c.stats(q);
    if (st.depth.done >= N) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const all: Task[] = [];
  for await (const t of c.allTasks(q, { status: "done", limit: 500 })) all.push(t);
  return all;
}

function throughput(tasks: Task[]): number {
  const ends = tasks.map((t) => Date.parse(t.finished_at!)).sort((a, b) => a - b);
  return (ends.length - 1 - WARMUP) / ((ends[ends.length - 1]! - ends[WARMUP]!) / 1000);
}

async function goRun(q: string): Promise<{ tps: number; cpu: number }> {
  const p = spawn(bin, ["worker", "--server", url, "--queue", `${q}=sleep`, "--concurrency", String(CONC), "--log-level", "warn"], { stdio: ["ignore", "ignore", "inherit"] });
  const tasks = await drained(q);
  const cpu = cpuSeconds(p.pid!);
  const exited = new Promise((r) => p.once("exit", r));
  p.kill("SIGTERM");
  await exited;
  return { tps: throughput(tasks), cpu };
}

async function tsRun(q: string): Promise<{ tps: number; cpu: number }> {
  const before = cpuSeconds(process.pid);
  const counts = new Map<string, number>();
  const counting: typeof fetch = (input, init) => {
    const path = new URL(String(input)).pathname;
    counts.set(path, (counts.get(path) ?? 0) + 1);
    return fetch(input, init);
  };
  const w = new Worker(process.env["E2_COUNT"] ? new Client(url, { fetch: counting }) : c, { concurrency: CONC });
  w.handle(q, (job) => new Promise<void>((resolve) => {
    const t = setTimeout(resolve, (job.payload as { ms: number }).ms);
    job.signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  }));
  const ac = new AbortController();
  const running = w.run(ac.signal);
  const tasks = await drained(q);
  const cpu = cpuSeconds(process.pid) - before; // includes this script's own polling of stats
  ac.abort();
  await running;
  if (counts.size) console.log("requests:", JSON.stringify([...counts]));
  return { tps: throughput(tasks), cpu };
}

const ideal = (CONC * 1000) / SLEEP;
const rows: string[] = [];
const figures: Record<string, number[]> = { go: [], ts: [] };
for (let r = 0; r < runs; r++) {
  for (const kind of ["go", "ts"] as const) {
    const q = `e2-${kind}-${Date.now().toString(36)}`;
    await c.createQueue(q);
    await enqueue(q);
    const la = loadavg()[0]!;
    const { tps, cpu } = kind === "go" ? await goRun(q) : await tsRun(q);
    figures[kind]!.push(tps);
    rows.push(`${kind} run ${r + 1}: ${tps.toFixed(1)} tasks/s, efficiency ${((100 * tps) / ideal).toFixed(1)} %, worker CPU ${cpu.toFixed(2)} s per ${N} tasks, load ${la.toFixed(1)}`);
    console.log(rows[rows.length - 1]);
    await c.deleteQueue(q).catch(() => undefined);
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
console.log(`median: go ${median(figures["go"]!).toFixed(1)}/s, ts ${median(figures["ts"]!).toFixed(1)}/s, ts/go ${(median(figures["ts"]!) / median(figures["go"]!)).toFixed(3)}`);
