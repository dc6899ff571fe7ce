// Shared pieces of the tests: a client for TASKFORGE_URL, fresh queues, a quiet logger.

import { Client, Worker, type Logger, type WorkerOptions } from "../src/index.js";

export const url = process.env["TASKFORGE_URL"] ?? "http://127.0.0.1:8080";
export const client = new Client(url, { token: process.env["TASKFORGE_TOKEN"] });

let n = 0;
/** A new queue with a name no other test uses. */
export async function freshQueue(prefix: string, settings: Parameters<Client["createQueue"]>[1] = {}): Promise<string> {
  const name = `ts-${prefix}-${Date.now().toString(36)}-${process.pid}-${n++}`;
  await client.createQueue(name, settings);
  return name;
}

/** Collects the worker's log lines; prints them when TASKFORGE_TEST_LOG is set. */
export function logger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const log = (level: string) => (m: string, f?: Record<string, unknown>) => {
    const line = `${level}: ${m} ${f ? JSON.stringify(f) : ""}`;
    lines.push(line);
    if (process.env["TASKFORGE_TEST_LOG"]) console.error(line);
  };
  return { lines, warn: log("warn"), error: log("error") };
}

/** A Worker with test settings. */
export function worker(opts: WorkerOptions = {}): Worker {
  return new Worker(client, { pollWaitMs: 1_000, shutdownGraceMs: 1_000, retryMinMs: 20, retryMaxMs: 200, logger: logger(), ...opts });
}

/** Polls cond every 50 ms until it holds or timeoutMs passes. */
export async function eventually(what: string, timeoutMs: number, cond: () => Promise<boolean> | boolean): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}

/** The server's lease in ms, measured from one claim (lease_expires_at minus the Date header). */
export async function leaseMs(): Promise<number> {
  const q = await freshQueue("lease");
  await client.enqueue(q, { payload: null });
  const a = await client.pollAnswer({ worker_id: "ts-lease-probe", queues: [q], wait_ms: 5_000 });
  const t = a.body.tasks[0];
  if (!t || a.date === undefined) throw new Error("lease probe: no task polled");
  await client.ack("ts-lease-probe", t.id, t.lease_token);
  return Date.parse(t.lease_expires_at) - a.date;
}
