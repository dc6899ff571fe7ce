// npm test: runs the tests (node --test) against a real TaskForge server.
//
// The server is TASKFORGE_URL when set. Otherwise this starts one from the
// repository (TASKFORGE_BIN, or a binary built with `go build ./cmd/taskforge`):
// `taskforge serve` with a 2 s lease when DATABASE_URL and REDIS_URL are set, else
// `taskforge dev` (embedded PostgreSQL and Redis, a 30 s lease: the test that
// heartbeats past a short lease then skips itself). It is stopped afterwards.

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url)); // sdk/typescript/dist/test
const repo = resolve(here, "../../../..");

function run(cmd: string, args: string[], env: Record<string, string | undefined>, cwd?: string): Promise<number> {
  return new Promise((res) => {
    const p = spawn(cmd, args, { stdio: "inherit", env, ...(cwd ? { cwd } : {}) });
    p.on("error", (e) => {
      console.error(`${cmd}: ${e.message}`);
      res(127);
    });
    p.on("exit", (code, sig) => res(code ?? (sig ? 1 : 0)));
  });
}

function freePort(): Promise<number> {
  return new Promise((res) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => res(typeof a === "object" && a ? a.port : 0));
    });
  });
}

async function ready(url: string, p: ChildProcess, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (p.exitCode !== null) throw new Error(`the server exited with ${p.exitCode}`);
    try {
      if ((await fetch(url + "/readyz")).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`the server at ${url} was not ready within ${timeoutMs} ms`);
}

let url = process.env["TASKFORGE_URL"];
let server: ChildProcess | undefined;
let tmp: string | undefined;
if (!url) {
  tmp = mkdtempSync(join(process.env["TMPDIR"] ?? "/tmp", "taskforge-ts-"));
  let bin = process.env["TASKFORGE_BIN"];
  if (!bin) {
    bin = join(tmp, "taskforge");
    console.error(`building taskforge into ${bin}`);
    if ((await run("go", ["build", "-o", bin, "./cmd/taskforge"], process.env, repo)) !== 0) process.exit(1);
  }
  const port = await freePort();
  url = `http://127.0.0.1:${port}`;
  const listen = `127.0.0.1:${port}`;
  const args = process.env["DATABASE_URL"] && process.env["REDIS_URL"]
    ? ["serve", "--listen", listen, "--lease-timeout", "2s", "--heartbeat-interval", "500ms", "--log-level", "warn"]
    : ["dev", "--demo=false", "--fresh", "--data-dir", join(tmp, "dev"), "--listen", listen];
  console.error(`starting taskforge ${args.join(" ")}`);
  server = spawn(bin, args, { stdio: ["ignore", "ignore", "inherit"], env: process.env });
  try {
    await ready(url, server, 90_000);
  } catch (e) {
    console.error((e as Error).message);
    server.kill("SIGTERM");
    process.exit(1);
  }
}

// The test files by name: the runner would take every file of a test/ directory.
const files = process.argv.slice(2).length ? process.argv.slice(2) : readdirSync(here).filter((f) => f.endsWith(".test.js")).map((f) => join(here, f));
const code = await run(process.execPath, ["--test", ...files], { ...process.env, TASKFORGE_URL: url });
if (server) {
  const exited = new Promise((r) => server!.once("exit", r));
  server.kill("SIGTERM");
  await Promise.race([exited, new Promise((r) => setTimeout(r, 20_000))]);
}
if (tmp) rmSync(tmp, { recursive: true, force: true });
process.exit(code);
