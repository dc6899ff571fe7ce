// The runtime's timing rules, without a server.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Backoff, heartbeatInterval } from "../src/timers.js";

test("heartbeats: the advertised interval, but at least three a lease", () => {
  assert.equal(heartbeatInterval(10_000, 30_500), 10_000); // the defaults: 10 s of a 30 s lease
  assert.equal(heartbeatInterval(500, 2_400), 500);
  assert.equal(heartbeatInterval(1_900, 2_700), 900); // an interval close to a 2 s lease: a third of it
  assert.equal(heartbeatInterval(0, 3_000), 1_000); // no interval advertised
  assert.equal(heartbeatInterval(0, 0), 10_000); // nothing known
  assert.equal(heartbeatInterval(10, 60), 50); // never a hot loop
});

test("backoff: jittered in [d/2, d], d doubling from min to max, reset to min", () => {
  const b = new Backoff(100, 400);
  const ds = [b.next(), b.next(), b.next(), b.next()];
  [100, 200, 400, 400].forEach((d, i) => assert.ok(ds[i]! >= d / 2 && ds[i]! <= d, `delay ${i}: ${ds[i]} for ${d}`));
  b.reset();
  assert.ok(b.next() <= 100);
});
