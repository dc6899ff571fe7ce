"""The worker's poll planning, as the TypeScript SDK's (sdk/typescript/src/room.ts)
and the Go SDK's slot keeper do it: how many tasks the next poll asks for (free
slots and prefetch room), whether it goes now or waits for more room, how many
polls are out, and how the prefetch room adapts to the answers. It holds no
tasks: the worker tells it how many run and how many wait, under its own lock.
Internal to the SDK; its own module so that tests can drive it."""

from __future__ import annotations

from typing import NamedTuple

#: The most tasks one poll may claim or one batch may ack.
MAX_POLL_TASKS = 100
#: Bounds the adapted prefetch room together with the slots: two full polls.
AUTO_PREFETCH_MAX = 2 * MAX_POLL_TASKS
#: How many polls the worker keeps out at once. A second poll goes only while
#: handlers run short and the queue has work, and only for a room worth a poll,
#: so that the next tasks are on their way while the server answers the first.
MAX_POLLS_IN_FLIGHT = 2


class PollPlan(NamedTuple):
    """The next poll as planned: its size, or (go False) none now."""

    go: bool
    free: int
    prefetch: int
    #: No poll goes: the acks held for one go alone now (nothing to ask for, or
    #: the hold ran out).
    acks_alone: bool


class PollRoom:
    """Plans polls for ``concurrency`` slots and a prefetch room of ``prefetch``
    (0: none) while handlers average under ``prefetch_below`` seconds; left to its
    default (``auto_prefetch``) the room adapts from ``prefetch`` up to
    AUTO_PREFETCH_MAX less the slots. Not thread-safe: the worker calls it under
    its lock."""

    def __init__(self, concurrency: int, prefetch: int, prefetch_below: float, auto_prefetch: bool) -> None:
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.prefetch_below = prefetch_below
        self.auto_prefetch = auto_prefetch and prefetch > 0
        # The prefetch room the next poll may fill. Adapting, it doubles when a
        # full poll comes back after the slots ran dry while the queue had work
        # (starved), shrinks by a quarter when one comes back with tasks still
        # waiting, and falls back to prefetch when one comes back short.
        self.prefetch_now = prefetch
        self.starved = False
        # The last poll answered brought fewer tasks than it asked for: the queue
        # ran dry, so a poll out without acks is likely waiting for work.
        self.last_short = False
        # Moving average of handler durations (seconds); 0 until one returned.
        self.avg_run = 0.0
        # Polls out, asking for `asked` tasks in all: the room they may fill counts as held.
        self.in_flight = 0
        self.asked = 0
        # The poller waits with a room too small to be worth a poll while tasks
        # wait at hand (or a poll is out); force_poll: the hold of acks ran out
        # meanwhile, so the next poll goes whatever its size.
        self.deferred = False
        self.force_poll = False

    def prefetching(self) -> bool:
        """Whether the worker prefetches now: it may, and its handlers run short."""
        return self.prefetch > 0 and 0 < self.avg_run < self.prefetch_below

    def size(self, running: int, waiting: int) -> tuple[int, int]:
        """The free slots and, while handlers run short, the prefetch room left (at
        most MAX_POLL_TASKS in all, free slots first), with running handlers and
        waiting tasks held; the tasks the polls out asked for count as waiting."""
        held = waiting + self.asked
        free = max(self.concurrency - running - held, 0)
        prefetch = 0
        if self.prefetching():
            # Waiting tasks beyond the slots they will fill are prefetched ones.
            prefetch = max(self.prefetch_now - max(held + running - self.concurrency, 0), 0)
        free = min(free, MAX_POLL_TASKS)
        return free, min(prefetch, MAX_POLL_TASKS - free)

    def poll_now(self, want: int, waiting: int) -> bool:
        """Whether a poll for want tasks goes now. With no poll out, a poll goes
        unless more tasks wait at hand than it would bring and it would fill less
        than half the room of the slots and the prefetch: those tasks keep the
        slots busy while the room grows to a poll worth its round trip. A second
        poll goes only while handlers run short and the queue has work, and only
        for half that room (at most a full poll). The hold of acks forces one
        (force_poll), within MAX_POLLS_IN_FLIGHT."""
        worth = want >= min((self.concurrency + self.prefetch_now) // 2, MAX_POLL_TASKS)
        if self.in_flight >= MAX_POLLS_IN_FLIGHT:
            return False
        if self.force_poll:
            return True
        if self.in_flight == 0:
            return worth or waiting <= want or not self.prefetching()
        return worth and not self.last_short and self.prefetching()

    def plan(self, running: int, waiting: int) -> PollPlan:
        """Plans the next poll with running handlers and waiting tasks held; the
        caller sends it (sent) when it goes."""
        free, prefetch = self.size(running, waiting)
        want = free + prefetch
        if want > 0 and self.poll_now(want, waiting):
            self.force_poll = False
            self.deferred = False
            return PollPlan(True, free, prefetch, False)
        # Idle: nothing to ask for and no poll out; a freed slot sets off the next
        # poll at once. Deferred: the room is small while tasks wait or a poll is out.
        idle = self.in_flight == 0 and want <= 0
        self.deferred = not idle
        acks_alone = self.force_poll or idle
        self.force_poll = False
        return PollPlan(False, 0, 0, acks_alone)

    def sent(self, want: int) -> None:
        """A poll for want tasks went out."""
        self.in_flight += 1
        self.asked += want

    def failed(self, want: int) -> None:
        """A poll for want tasks failed: it claimed nothing and says nothing of the queue."""
        self.in_flight -= 1
        self.asked -= want

    def answered(self, want: int, short: bool, waiting: int) -> None:
        """A poll planned for want tasks came back, short (fewer than it asked
        for) or not, while waiting tasks were still at hand (those it brought not
        counted)."""
        self.in_flight -= 1
        self.asked -= want
        self.adapt(short, waiting)
        self.last_short = short

    def adapt(self, short: bool, waiting: int) -> None:
        """Adapts the prefetch room to a poll's answer (see prefetch_now), when it adapts at all."""
        if self.auto_prefetch:
            if short:
                self.prefetch_now = self.prefetch
            elif self.starved:
                self.prefetch_now = min(self.prefetch_now * 2, max(AUTO_PREFETCH_MAX - self.concurrency, self.prefetch))
            elif waiting > 0:
                self.prefetch_now = max(self.prefetch_now - self.prefetch_now // 4, self.prefetch)
        self.starved = False

    def ran(self, seconds: float) -> None:
        """Folds a handler's duration (0 when it did not run) into the average that
        decides whether to prefetch."""
        if seconds > 0:
            self.avg_run = seconds if self.avg_run == 0 else self.avg_run + (seconds - self.avg_run) / 5
