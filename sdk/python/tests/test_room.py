"""The worker's poll planning (taskforge._room) on its own: no server needed."""

from __future__ import annotations

import pytest

from taskforge._room import PollRoom


def room(concurrency: int, prefetch: int, polls: int, asked: int) -> PollRoom:
    """A room of concurrency slots whose handlers run short (so it prefetches, the
    prefetch room adapting from prefetch), with polls out asking for asked tasks."""
    r = PollRoom(concurrency, prefetch, 0.25, True)
    r.avg_run = 0.001
    r.in_flight = polls
    r.asked = asked
    return r


# 16 slots and a prefetch room of 84 (100 in all). With no poll out, a poll for a
# small room waits while more tasks wait at hand than it would bring; it goes once
# they are fewer, or once the room is half of the slots and the prefetch; a second
# poll goes only for that half, while the queue has work.
@pytest.mark.parametrize("running,waiting,polls,asked,want,last_short", [
    pytest.param(16, 0, 0, 0, 84, False, id="nothing waits: any room"),
    pytest.param(16, 70, 0, 0, 0, False, id="more wait than a small room"),
    pytest.param(16, 40, 0, 0, 44, False, id="fewer wait than the room"),
    pytest.param(16, 0, 1, 20, 64, False, id="a poll out: a second for half the room"),
    pytest.param(16, 20, 1, 20, 0, False, id="a poll out: not for a small room"),
    pytest.param(16, 0, 1, 20, 0, True, id="a poll out, the queue dry: no second"),
    pytest.param(0, 0, 2, 20, 0, False, id="two polls out: no third"),
])
def test_a_poll_waits_for_room_worth_its_round_trip(
    running: int, waiting: int, polls: int, asked: int, want: int, last_short: bool
) -> None:
    r = room(16, 84, polls, asked)
    r.last_short = last_short
    p = r.plan(running, waiting)
    assert (p.free + p.prefetch if p.go else 0) == want, p
    if not p.go:  # a poll that waits leaves the poller deferred (not idle), so held acks wait for it
        assert r.deferred


def test_a_deferred_poll_goes_whatever_its_size_once_the_hold_of_acks_ran_out() -> None:
    r = room(16, 84, 0, 0)
    assert not r.plan(16, 70).go
    r.force_poll = True
    p = r.plan(16, 70)
    assert p.go and p.free + p.prefetch == 14 and not r.force_poll


def test_the_prefetch_room_adapts_and_a_set_prefetch_never_moves() -> None:
    r = room(16, 16, 0, 0)
    steps = [(True, False, 0, 32), (True, False, 0, 64), (True, False, 0, 128), (True, False, 0, 184),
             (True, False, 0, 184), (False, False, 10, 138), (False, False, 0, 138), (False, True, 0, 16),
             (False, False, 10, 16)]
    for i, (starved, short, waiting, want) in enumerate(steps):
        r.starved = starved
        r.adapt(short, waiting)
        assert r.prefetch_now == want, (i, starved, short, waiting)
    fixed = PollRoom(16, 16, 0.25, False)
    fixed.starved = True
    fixed.adapt(False, 0)
    assert fixed.prefetch_now == 16, "a set prefetch moved"


def test_a_polls_answer_frees_the_room_it_was_planned_for() -> None:
    r = room(16, 84, 0, 0)
    p = r.plan(0, 0)
    r.sent(p.free + p.prefetch)
    assert (r.in_flight, r.asked) == (1, 100)
    r.answered(100, False, 0)
    assert (r.in_flight, r.asked) == (0, 0)
    r.sent(40)
    r.failed(40)
    assert r.asked == 0
