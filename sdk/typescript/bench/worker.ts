// The TypeScript counterpart of `taskforge worker --queue Q=HANDLER`, for bench/e2.ts
// and the benchmark harness (`taskforge bench --language typescript`): "noop"
// returns at once, "sleep" (the default) sleeps each task's payload.ms, then acks.
// Env: TASKFORGE_URL, QUEUE, HANDLER, CONCURRENCY, PREFETCH (default the runtime's),
// WORKER_ID. Stops gracefully on SIGTERM or SIGINT.

import { Client, Worker, shutdownSignal } from "../src/index.js";

const env = process.env;
// With COUNT set, the requests made are counted by path and printed on stderr at the end.
const counts = new Map<string, number>();
const counting: typeof fetch = (input, init) => {
  const path = new URL(String(input)).pathname;
  counts.set(path, (counts.get(path) ?? 0) + 1);
  return fetch(input, init);
};
const w = new Worker(new Client(env["TASKFORGE_URL"], env["COUNT"] ? { fetch: counting } : {}), {
  concurrency: Number(env["CONCURRENCY"] ?? 1),
  ...(env["WORKER_ID"] ? { id: env["WORKER_ID"] } : {}),
  ...(env["PREFETCH"] !== undefined ? { prefetch: Number(env["PREFETCH"]) } : {}),
});
if (env["HANDLER"] === "noop") {
  w.handle(env["QUEUE"]!, () => undefined);
} else {
  w.handle(env["QUEUE"]!, (job) => new Promise<void>((resolve) => {
    const t = setTimeout(resolve, (job.payload as { ms: number }).ms);
    job.signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  }));
}
const stop = shutdownSignal();
await w.run(stop.signal);
stop.dispose();
if (env["COUNT"]) console.error(`requests: ${JSON.stringify(Object.fromEntries(counts))}`);
