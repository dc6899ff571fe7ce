// The worker's poll planning (src/room.ts) on its own: no server needed.

import assert from "node:assert/strict";
import { test } from "node:test";
import { PollRoom } from "../src/room.js";

/**
 * A room of concurrency slots whose handlers run short (so it prefetches, the
 * prefetch room adapting from prefetch), with polls out asking for asked tasks.
 */
function room(concurrency: number, prefetch: number, polls: number, asked: number): PollRoom {
  const r = new PollRoom(concurrency, prefetch, 250, true);
  r.avgRun = 1;
  r.inFlight = polls;
  r.asked = asked;
  return r;
}

// 16 slots and a prefetch room of 84 (100 in all). With no poll out, a poll for a
// small room waits while more tasks wait at hand than it would bring; it goes once
// they are fewer, or once the room is half of the slots and the prefetch; a second
// poll goes only for that half, while the queue has work.
for (const c of [
  { name: "nothing waits: any room", running: 16, waiting: 0, polls: 0, asked: 0, want: 84, lastShort: false },
  { name: "more wait than a small room", running: 16, waiting: 70, polls: 0, asked: 0, want: 0, lastShort: false },
  { name: "fewer wait than the room", running: 16, waiting: 40, polls: 0, asked: 0, want: 44, lastShort: false },
  { name: "a poll out: a second for half the room", running: 16, waiting: 0, polls: 1, asked: 20, want: 64, lastShort: false },
  { name: "a poll out: not for a small room", running: 16, waiting: 20, polls: 1, asked: 20, want: 0, lastShort: false },
  { name: "a poll out, the queue dry: no second", running: 16, waiting: 0, polls: 1, asked: 20, want: 0, lastShort: true },
  { name: "two polls out: no third", running: 0, waiting: 0, polls: 2, asked: 20, want: 0, lastShort: false },
]) {
  test(`a poll waits for room worth its round trip: ${c.name}`, () => {
    const r = room(16, 84, c.polls, c.asked);
    r.lastShort = c.lastShort;
    const p = r.plan(c.running, c.waiting);
    assert.equal(p.go ? p.free + p.prefetch : 0, c.want, JSON.stringify(p));
    // A poll that waits leaves the poller deferred (not idle), so held acks wait for it.
    if (!p.go) assert.equal(r.deferred, true);
  });
}

test("a deferred poll goes whatever its size once the hold of acks ran out", () => {
  const r = room(16, 84, 0, 0);
  assert.equal(r.plan(16, 70).go, false);
  r.forcePoll = true;
  const p = r.plan(16, 70);
  assert.equal(p.go, true);
  assert.equal(p.free + p.prefetch, 14);
  assert.equal(r.forcePoll, false);
});

test("the prefetch room adapts; a set prefetch never moves", () => {
  const r = room(16, 16, 0, 0);
  const steps: { starved: boolean; short: boolean; waiting: number; want: number }[] = [
    { starved: true, short: false, waiting: 0, want: 32 }, { starved: true, short: false, waiting: 0, want: 64 },
    { starved: true, short: false, waiting: 0, want: 128 }, { starved: true, short: false, waiting: 0, want: 184 },
    { starved: true, short: false, waiting: 0, want: 184 }, { starved: false, short: false, waiting: 10, want: 138 },
    { starved: false, short: false, waiting: 0, want: 138 }, { starved: false, short: true, waiting: 0, want: 16 },
    { starved: false, short: false, waiting: 10, want: 16 },
  ];
  steps.forEach((s, i) => {
    r.starved = s.starved;
    r.adapt(s.short, s.waiting);
    assert.equal(r.prefetchNow, s.want, `step ${i} ${JSON.stringify(s)}`);
  });
  const set = new PollRoom(16, 16, 250, false);
  set.starved = true;
  set.adapt(false, 0);
  assert.equal(set.prefetchNow, 16, "a set prefetch moved");
});

test("a poll's answer frees the room it was planned for", () => {
  const r = room(16, 84, 0, 0);
  const p = r.plan(0, 0);
  r.sent(p.free + p.prefetch);
  assert.equal(r.inFlight, 1);
  assert.equal(r.asked, 100);
  r.answered(100, false, 0);
  assert.equal(r.inFlight, 0);
  assert.equal(r.asked, 0);
  r.sent(40);
  r.failed(40);
  assert.equal(r.asked, 0);
});
