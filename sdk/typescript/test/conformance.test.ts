// Runs the conformance scenario (dist/conformance/scenario.js) as a subprocess,
// as the repository's Go test does, and checks its outcome over HTTP the way
// that test checks it in PostgreSQL.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import type { Task } from "../src/index.js";
import { client, freshQueue, url } from "./helpers.js";

const scenario = join(dirname(fileURLToPath(import.meta.url)), "../conformance/scenario.js");

function runScenario(queue: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [scenario], { env: { ...process.env, TASKFORGE_URL: url, TASKFORGE_QUEUE: queue } });
    let stdout = "";
    let stderr = "";
    p.stdout!.on("data", (d) => (stdout += d.toString()));
    p.stderr!.on("data", (d) => (stderr += d.toString()));
    p.on("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

const ms = (s: string | null | undefined) => Date.parse(s ?? "");

test("conformance scenario: ack past the lease, nack into a retry, permanent failure, replay, release on SIGTERM", { timeout: 90_000 }, async () => {
  const q = await freshQueue("conformance");
  const out = await runScenario(q);
  assert.equal(out.code, 0, `scenario exited ${out.code}: ${out.stderr}`);
  const lines = out.stdout.trim().split("\n");
  assert.equal(lines.length, 1, `one line on stdout: ${out.stdout}`);
  const ids = JSON.parse(lines[0]!) as Record<"ack" | "nack" | "fail" | "replay" | "hold", string>;
  const get = (id: string): Promise<Task> => client.getTask(q, id);

  const ack = await get(ids.ack);
  assert.equal(ack.status, "done");
  assert.deepEqual(ack.result, { kind: "ack", ok: true });
  assert.deepEqual(ack.progress, { pct: 50 });
  assert.equal(ack.attempt_history!.length, 1);
  const [a] = ack.attempt_history!;
  assert.equal(a!.status, "succeeded");
  assert.ok(ms(a!.finished_at) - ms(a!.started_at) > 2_000, "the ack attempt lasted over 2 s");

  const nack = await get(ids.nack);
  assert.equal(nack.status, "done");
  assert.deepEqual(nack.attempt_history!.map((x) => x.status), ["failed", "succeeded"]);
  assert.match(nack.attempt_history![0]!.error!, /^transient/);
  assert.ok(ms(nack.attempt_history![1]!.started_at) - ms(nack.attempt_history![0]!.finished_at) >= 200, "the retry came ≥ 200 ms after the failure");

  const failed = await get(ids.fail);
  assert.equal(failed.status, "dead");
  assert.equal(failed.attempt_history!.length, 1);
  assert.equal(failed.attempt_history![0]!.status, "failed");
  assert.match(failed.attempt_history![0]!.error!, /permanent failure/);

  const replay = await get(ids.replay);
  assert.equal(replay.status, "done");
  assert.equal(replay.replayed_from, ids.fail);
  assert.deepEqual(replay.result, { kind: "fail", ok: true });

  const hold = await get(ids.hold);
  assert.ok(hold.status === "pending" || hold.status === "claimed", `hold is ${hold.status}`);
  assert.equal(hold.releases, 1);
  assert.deepEqual(hold.attempt_history!.map((x) => x.status), ["released"]);
});
