"""The worker runtime: runs handlers for the tasks of its queues, as the Go SDK's
client.Worker does (docs/sdk.md, "Worker").

Threads, each with one job:

- the **poller** plans long polls for as many tasks as there are free slots (and,
  while handlers run short, for the prefetch room in the same poll), carrying the
  acks of handlers that returned meanwhile, and takes in their answers; **poll
  threads** send them, up to two at once: while handlers outrun a poll's round
  trip, a second goes out for a room worth it while the first is answered
  (``_room.PollRoom`` plans them, as the TypeScript and Go SDKs do);
- the **heartbeater** extends every held lease once per heartbeat interval (the
  one the server advertises, at most half the lease), all in one batch request,
  and notices cancellations, lost leases and task timeouts;
- task threads (a pool that grows to what is needed: one per running handler,
  plus those still reporting) run a handler, then report its outcome (ack, nack,
  snooze) with retries through outages;
- the thread that called :meth:`Worker.run` waits for a stop (``stop()``, SIGTERM or
  SIGINT) and then shuts down gracefully: no more polls (an open one is abandoned),
  up to ``shutdown_grace`` for running handlers, then the tasks still held are
  released, which spends none of their retry budget.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import secrets
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar, overload

from .client import UNSET, Client
from .errors import (
    APIError,
    Internal,
    InvalidRequest,
    LeaseExpired,
    LeaseLost,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermanentError,
    RateLimited,
    RetryableError,
    Snooze,
    StopReason,
    TaskCancelled,
    TaskForgeError,
    TaskTimedOut,
    Unavailable,
    WorkerStopping,
)
from ._room import MAX_POLL_TASKS as _MAX_POLL_TASKS
from ._room import MAX_POLLS_IN_FLIGHT, PollRoom
from .types import PolledTask, PollResult

__all__ = ["Worker", "Job", "Handler", "DEFAULT_PREFETCH_BELOW"]

log = logging.getLogger("taskforge.worker")

#: A handler takes the job and returns its result (any JSON value; None for
#: none). Raising nacks the task: see :class:`Worker`.
Handler = Callable[["Job"], Any]
H = TypeVar("H", bound=Handler)

#: Average handler duration (seconds) under which the worker prefetches.
DEFAULT_PREFETCH_BELOW = 0.25

_MAX_POLL_WAIT = 30.0
_FINAL_REPORT_TIMEOUT = 5.0  # how long Run keeps reporting after the grace period
_LEASE_MARGIN = 0.25  # how long past its estimated expiry a lease is still assumed held
_MAX_ERROR_TEXT = 60 << 10  # keeps a nack's error under the server's 64 KiB
_MAX_POLL_ACK_RESULT = 16 << 10  # larger results go alone, not on a poll
_REPORT_TIMEOUT = 10.0
# How long an ack waits for the next poll while a poll that may wait for work is out:
# several polls' round trips when the queue has work, short beside a lease (or the
# 30 s a poll may wait) when it has none. Then it goes alone.
_POLL_ACK_HOLD = 0.05
_DEFAULT_HEARTBEAT_INTERVAL = 10.0  # until a task advertises its own
_MAX_HEARTBEAT_BATCH = 1000

# Job states.
_WAITING, _RUNNING, _REPORTING = "waiting", "running", "reporting"


def _temporary(e: BaseException) -> bool:
    return isinstance(e, (Unavailable, Internal, RateLimited))


class _Backoff:
    """Jittered exponential delays: each drawn from [d/2, d], d doubling from lo to hi."""

    def __init__(self, lo: float, hi: float) -> None:
        self.lo, self.hi, self.cur = lo, hi, 0.0

    def next(self) -> float:
        self.cur = self.lo if self.cur == 0 else min(self.cur * 2, self.hi)
        return random.uniform(self.cur / 2, self.cur)

    def reset(self) -> None:
        self.cur = 0.0


class Job:
    """A task as its handler receives it. Read-only for the handler, apart from
    :meth:`progress`.

    The runtime cannot interrupt a Python thread: a handler that runs long should
    check :attr:`stopping` (or wait with :meth:`wait`) and return when it is set.
    :attr:`stop_reason` then says why: :class:`TaskCancelled`,
    :class:`LeaseExpired` (the task may run elsewhere; nothing is reported),
    :class:`TaskTimedOut` or :class:`WorkerStopping`.
    """

    def __init__(self, runner: _Runner, t: PolledTask, recv: float, date: datetime | None) -> None:
        self.id: str = t.id
        self.queue: str = t.queue
        self.payload: Any = t.payload
        self.priority: int = t.priority
        #: 1-based attempt number; also a monotonic fencing token.
        self.attempt: int = t.attempt
        self.timeout_seconds: int | None = t.timeout_seconds
        self.worker_id: str = runner.id
        #: The enqueue's W3C trace context, or None.
        self.traceparent: str | None = t.traceparent
        self._r = runner
        self._lease_token = t.lease_token
        self._stop = threading.Event()
        self._reason: StopReason | None = None
        self._mu = threading.Lock()
        self._owned = False  # set by whoever reports the task
        self.lost = False  # the lease is known to be lost
        self.state = _WAITING
        self._result: Any = UNSET
        self._lease_len = 0.0
        self._deadline = 0.0  # monotonic estimate of the lease's expiry; 0 when unknown
        self._extend(recv, t.lease_expires_at, date)
        interval = t.heartbeat_interval_ms / 1000 if t.heartbeat_interval_ms else 0.0
        if interval <= 0:
            interval = self._lease_len / 3 if self._lease_len > 0 else 10.0
        if self._lease_len > 0:
            interval = min(interval, self._lease_len / 2)
        self._hb_interval = max(interval, 0.05)
        self._hb_stopped = False
        self._hb_inflight = False
        self._timeout_at = recv + t.timeout_seconds if t.timeout_seconds else 0.0

    # --- for handlers ------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """Whether the handler should stop now (see :attr:`stop_reason`)."""
        return self._stop.is_set()

    @property
    def stop_reason(self) -> StopReason | None:
        """Why the handler should stop, or None while it may go on."""
        return self._reason

    def wait(self, timeout: float | None = None) -> bool:
        """Sleeps up to ``timeout`` seconds (None: until told to stop); True when
        the handler should stop."""
        return self._stop.wait(timeout)

    def raise_if_stopping(self) -> None:
        """Raises :attr:`stop_reason` when the handler should stop."""
        if self._reason is not None:
            raise self._reason

    def progress(self, value: Any) -> None:
        """Reports ``value`` (any JSON value ≤ 4 KiB; None clears) as the task's
        progress at once: a heartbeat that also extends the lease. Raises
        :class:`LeaseLost` when the lease is gone and :class:`InvalidRequest`
        when the server refuses the value."""
        if self.lost:
            raise LeaseLost(409, "lease_lost", f"task {self.id}: the lease was lost")
        self._r.heartbeat(self, progress=value)

    # --- for the runtime ---------------------------------------------------------

    def _claim(self) -> bool:
        with self._mu:
            if self._owned:
                return False
            self._owned = True
            return True

    def _signal_stop(self, reason: StopReason) -> None:
        with self._mu:
            if self._reason is None:
                self._reason = reason
        self._stop.set()

    def _extend(self, recv: float, expires: datetime | None, date: datetime | None) -> None:
        # Date is truncated to the second and recv follows the answer, so the
        # estimate errs late: the worker never gives up on a lease still honoured.
        if expires is None or date is None:
            return
        length = (expires - date).total_seconds()
        if length > 0:
            with self._mu:
                self._lease_len = length
                self._deadline = recv + length

    def _lease_expired(self, now: float) -> bool:
        with self._mu:
            return self._deadline > 0 and now > self._deadline + _LEASE_MARGIN


class Worker:
    """Runs handlers for the tasks of its queues.

    ``client`` is a :class:`~taskforge.Client` (or the server's URL). Settings:
    ``concurrency`` (10) tasks at once; ``prefetch`` (``concurrency``, at most
    100; 0 = none) tasks claimed beyond the free slots, in the same poll, while
    handlers average under ``prefetch_below`` (0.25 s), so the next task is at
    hand when one returns (capped queues fill only free slots). Left to its
    default the prefetch room adapts: while polls come back full after the slots
    ran out of tasks (handlers outrunning polls), it doubles, up to 200 tasks with
    the slots; it shrinks by a quarter while tasks still wait when a poll comes
    back, and returns to the default when one comes back short. A value set never
    moves. ``poll_wait`` (10 s,
    ≤ 30) per long poll; ``shutdown_grace`` (10 s; 0 = hand back at once);
    ``retry_min``/``retry_max`` (0.1 s / 5 s) bound the backoff through outages;
    ``worker_id`` defaults to ``<hostname>-<pid>-<random>``.

    A handler's outcome: returning acks the task with the returned value as its
    result (None: no result); :class:`RetryableError` (with ``retry_after``) or
    any other exception nacks it for a retry; :class:`PermanentError` dead-letters
    it at once; :class:`Snooze` releases it for later without spending a retry.

    Queues are polled in the order their handlers were registered.
    """

    def __init__(
        self,
        client: Client | str,
        *,
        concurrency: int = 10,
        prefetch: int | None = None,
        prefetch_below: float = DEFAULT_PREFETCH_BELOW,
        poll_wait: float = 10.0,
        shutdown_grace: float = 10.0,
        retry_min: float = 0.1,
        retry_max: float = 5.0,
        worker_id: str | None = None,
    ) -> None:
        self.client = client if isinstance(client, Client) else Client(client)
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.id = worker_id or f"{socket.gethostname() or 'worker'}-{os.getpid()}-{secrets.token_hex(3)}"
        self.concurrency = concurrency
        self.prefetch = min(max(concurrency if prefetch is None else prefetch, 0), _MAX_POLL_TASKS)
        # The prefetch was left to its default, so its room adapts.
        self._auto_prefetch = prefetch is None
        self.prefetch_below = prefetch_below
        self.poll_wait = min(max(poll_wait, 0.0), _MAX_POLL_WAIT)
        self.shutdown_grace = max(shutdown_grace, 0.0)
        self.retry_min = retry_min
        self.retry_max = max(retry_max, retry_min)
        self._handlers: dict[str, Handler] = {}
        self._queues: list[str] = []
        self._running = False
        self._stop_requested = False
        self._wake = threading.Event()

    # --- registration and control --------------------------------------------------

    @overload
    def handle(self, queue: str) -> Callable[[H], H]: ...

    @overload
    def handle(self, queue: str, handler: H) -> H: ...

    def handle(self, queue: str, handler: H | None = None) -> H | Callable[[H], H]:
        """Registers ``handler`` for ``queue``; without one, returns a decorator::

            @worker.handle("emails")
            def send(job): ...
        """
        if handler is None:
            def deco(h: H) -> H:
                self.handle(queue, h)
                return h
            return deco
        if self._running:
            raise RuntimeError("taskforge: handle() called while the worker runs")
        if queue in self._handlers:
            raise ValueError(f"taskforge: queue {queue!r} already has a handler")
        self._handlers[queue] = handler
        self._queues.append(queue)
        return handler

    def stop(self) -> None:
        """Asks a running :meth:`run` to shut down gracefully (safe from any
        thread, and from a signal handler)."""
        self._stop_requested = True
        self._wake.set()

    def run(self, *, handle_signals: bool = True) -> None:
        """Polls and runs tasks until :meth:`stop`, SIGTERM or SIGINT (the
        signals are handled while ``run`` runs in the main thread, unless
        ``handle_signals`` is false), then shuts down gracefully and returns.
        Raises :class:`InvalidRequest` when the server rejects the worker's poll."""
        if self._running:
            raise RuntimeError("taskforge: the worker is already running")
        if not self._queues:
            raise RuntimeError("taskforge: the worker has no handlers; call handle() first")
        self._running = True
        self._stop_requested = False
        self._wake.clear()
        previous: dict[signal.Signals, Any] = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            def on_signal(signum: int, frame: Any) -> None:
                # Only a flag: run's loop below sees it within 0.1 s.
                self._stop_requested = True
            for s in (signal.SIGTERM, signal.SIGINT):
                previous[s] = signal.signal(s, on_signal)
        r = _Runner(self)
        try:
            r.start()
            while not self._stop_requested and r.fatal is None:
                self._wake.wait(0.1)
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            r.shutdown()
            self._running = False
        if r.fatal is not None:
            raise r.fatal


class _PollRequest:
    """A poll the poller planned: the room it was planned for (want), the tasks
    it asks for (asked: less against an older server), its prefetch fields, the
    jobs whose acks it carries, and when it went (monotonic)."""

    __slots__ = ("want", "asked", "shape", "acks", "sent")

    def __init__(self, want: int, asked: int, shape: dict[str, Any], acks: list[Job]) -> None:
        self.want = want
        self.asked = asked
        self.shape = shape
        self.acks = acks
        self.sent = 0.0


class _Polled:
    """A poll's answer (res), or its failure (err), received at recv (monotonic)."""

    __slots__ = ("req", "res", "err", "recv")

    def __init__(self, req: _PollRequest, res: PollResult | None, err: BaseException | None, recv: float) -> None:
        self.req = req
        self.res = res
        self.err = err
        self.recv = recv


class _Runner:
    """One run of a Worker: the state shared by its threads, under one lock."""

    def __init__(self, w: Worker) -> None:
        self.w = w
        self.id = w.id
        self.c = w.client
        # Polls get a transport of their own, so that shutdown can abandon an open
        # long poll without touching reports in flight. Polls that carry acks get
        # another (apc), which shutdown leaves alone: the server answers them at
        # once, and an answer not read would leave the acks' fate unknown (sent
        # again, they may be refused as lost leases, and the tasks run again).
        self.pc = Client(w.client.url, token=w.client._token, timeout=_REPORT_TIMEOUT)
        self.apc = Client(w.client.url, token=w.client._token, timeout=_REPORT_TIMEOUT)
        self.handlers = dict(w._handlers)
        self.queues = list(w._queues)
        self.fatal: BaseException | None = None

        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.active: set[Job] = set()
        self.waiting: list[Job] = []
        self.running = 0
        self.reporting = 0
        self.handing_back = False  # shutdown hands tasks back: start no more
        self.poll_stop = False
        self.poller_idle = False
        self.poller_gone = False
        # A handler's ack waits for the next poll (poll_acks): the one its freed
        # slot sets off when the poller is idle, else the one after the polls out,
        # for at most _POLL_ACK_HOLD (hold_timer): a poll out may be waiting for
        # work. Serve commits a poll's acks with its claim. A poll that carries acks
        # (ack_polls_out) is answered at once; after a poll that brought fewer tasks
        # than it asked for (room.last_short) the queue has run dry, a poll out is
        # likely waiting for work, and an ack goes at once instead.
        self.ack_polls_out = 0
        # The server refused prefetch_tasks (older than the field): free slots and
        # prefetch room go in separate polls. Only the poller touches it.
        self.old_server = False
        self.hold_timer: threading.Timer | None = None
        self.poll_acks: list[Job] = []
        # What the next poll asks for, whether it goes now, how many polls are out
        # (up to two: a second goes while handlers outrun the first's round trip),
        # and the prefetch room (see _room.PollRoom).
        self.room = PollRoom(w.concurrency, w.prefetch, w.prefetch_below, w._auto_prefetch)
        # Polls go out from poll threads (one per poll out, kept for the run);
        # their answers wait here for the poller.
        self.pollq: queue.SimpleQueue[_PollRequest | None] = queue.SimpleQueue()
        self.poll_threads: list[threading.Thread] = []
        self.idle_poll_threads = 0
        self.answers: list[_Polled] = []

        # Task threads live for the whole run: starting a thread waits for it to
        # be scheduled, which on a busy box costs more than a short task's poll.
        self.jobq: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.idle_threads = 0  # task threads waiting for a job none is reserved for
        self.task_threads: list[threading.Thread] = []

        self.ack_lock = threading.Lock()
        self.ack_queue: list[Job] = []
        self.ack_sending = False

        self.bg_stop = threading.Event()  # ends report retries
        # One heartbeat round per interval (the shortest any task advertised) extends
        # every lease held, in one /workers/heartbeat/batch request; a server without
        # that endpoint gets one heartbeat per task, sent by a small pool.
        self.hb_cond = threading.Condition(threading.Lock())
        self.hb_interval = _DEFAULT_HEARTBEAT_INTERVAL
        self.hb_reset = False
        self.hb_single = False
        self.hb_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="taskforge-heartbeat")
        self.poller = threading.Thread(target=self.poll_loop, name="taskforge-poller", daemon=True)
        self.heartbeater = threading.Thread(target=self.heartbeat_loop, name="taskforge-heartbeater", daemon=True)

    def start(self) -> None:
        self.poller.start()
        self.heartbeater.start()

    # --- polling -----------------------------------------------------------------

    def poll_loop(self) -> None:
        """The poller: plans polls (up to MAX_POLLS_IN_FLIGHT out at once), hands
        them to poll threads, and takes in their answers, until the run stops or
        the server refuses the poll itself; then waits for the polls out (shutdown
        aborts them) and hands the acks it held to the sender."""
        b = _Backoff(self.w.retry_min, self.w.retry_max)
        try:
            while True:
                req: _PollRequest | None = None
                acks: list[Job] = []
                with self.cond:
                    a = self.answers.pop(0) if self.answers else None
                    if a is None:
                        if self.poll_stop or self.fatal is not None:
                            if self.room.in_flight == 0:
                                break
                            self.cond.wait()
                            continue
                        req, acks = self.plan_poll_locked()
                        if req is None and not acks:
                            self.cond.wait()
                            continue
                if a is not None:
                    self.settle(a, b)
                elif req is not None:
                    self.send_poll(req)
                else:
                    self.ack_alone(acks)
        finally:
            with self.cond:
                self.poller_gone = True
                self.stop_hold_locked()
                acks, self.poll_acks = self.poll_acks, []
            self.ack_alone(acks)

    def plan_poll_locked(self) -> tuple[_PollRequest | None, list[Job]]:
        """The next poll, carrying the acks held for it; or, when no poll goes now,
        the acks to send alone, if any (others stay held for the next poll, within
        _POLL_ACK_HOLD). A poll that goes counts as out from here."""
        p = self.room.plan(self.running, len(self.waiting))
        self.poller_idle = not p.go and self.room.in_flight == 0 and not self.room.deferred
        if not (p.go or p.acks_alone):
            if self.poll_acks and self.hold_timer is None:
                self.start_hold_locked()
            return None, []
        self.stop_hold_locked()
        acks, self.poll_acks = self.poll_acks, []
        if not p.go:
            return None, acks
        want = p.free + p.prefetch
        # Free slots and prefetch room in one poll; against a server older than
        # prefetch_tasks, the free slots while there are any, else the prefetch room.
        asked = want
        shape: dict[str, Any] = {"prefetch_tasks": p.prefetch}
        if self.old_server:
            asked, shape = (p.free, {}) if p.free > 0 else (p.prefetch, {"prefetch": True})
        self.room.sent(want)
        if acks:
            self.ack_polls_out += 1
        return _PollRequest(want, asked, shape, acks), []

    def send_poll(self, req: _PollRequest) -> None:
        """Hands req to an idle poll thread, starting one when none is idle."""
        req.sent = time.monotonic()
        self.pollq.put(req)
        with self.lock:
            spawn = self.idle_poll_threads == 0
            if not spawn:
                self.idle_poll_threads -= 1
        if spawn:
            t = threading.Thread(target=self.poll_thread, name="taskforge-poll", daemon=True)
            self.poll_threads.append(t)
            t.start()

    def poll_thread(self) -> None:
        """Sends the polls it is handed, one at a time, each answer (or failure)
        to the poller."""
        while True:
            req = self.pollq.get()
            if req is None:
                return
            res: PollResult | None = None
            err: BaseException | None = None
            try:
                c = self.apc if req.acks else self.pc
                res = c.poll(self.id, self.queues, max_tasks=req.asked, wait_ms=int(self.w.poll_wait * 1000),
                             **req.shape, acks=[self.ack_item(j) for j in req.acks] or None)
            except Exception as e:  # noqa: BLE001 - the poller decides
                err = e
            recv = time.monotonic()
            with self.cond:
                if req.acks:
                    self.ack_polls_out -= 1
                self.answers.append(_Polled(req, res, err, recv))
                self.idle_poll_threads += 1
                self.cond.notify_all()

    def settle(self, a: _Polled, b: _Backoff) -> None:
        """Takes in a poll's answer: the acks it carried are settled, what it
        claimed starts or waits for a slot. A refusal of the poll itself ends the
        run (fatal); a failure the worker can retry is waited out (backoff b), as
        is a rate limit's hold."""
        req, res, err = a.req, a.res, a.err
        self.settle_poll_acks(req.acks, res.acks if res is not None else None)
        if res is None:
            with self.cond:
                self.room.failed(req.want)
            if self.poll_stop:
                return
            if isinstance(err, InvalidRequest) and req.shape.get("prefetch_tasks") and not self.old_server:
                # A server older than prefetch_tasks refuses the field (and acked
                # nothing): poll as before.
                self.old_server = True
                log.warning("worker %s: the server refused a poll with prefetch_tasks; polling as for an older server: %s",
                            self.id, err)
                return
            if isinstance(err, (InvalidRequest, NotFound, MethodNotAllowed)):
                if self.fatal is None:
                    self.fatal = err
                self.w._wake.set()
                return
            d = b.next()
            if isinstance(err, APIError):
                log.warning("worker %s: poll failed; retrying in %.2fs: %s", self.id, d, err)
            else:  # an answer this SDK cannot read: keep polling
                log.error("worker %s: poll failed; retrying in %.2fs", self.id, d, exc_info=err)
            self.flush_poll_acks()
            self.sleep_unless_stopping(d)
            return
        b.reset()
        with self.cond:
            self.room.answered(req.want, len(res.tasks) < req.asked, len(self.waiting))
        for t in res.tasks:
            try:
                self.start_job(t, a.recv, res.date)
            except Exception:  # noqa: BLE001 - the task's lease expires and it runs again
                log.exception("worker %s: could not start task %s", self.id, t.id)
        if not res.tasks and res.retry_after > 0 and a.recv - req.sent < self.w.poll_wait / 2:
            # A rate limit holds the work back and the server answered early.
            self.flush_poll_acks()
            self.sleep_unless_stopping(min(res.retry_after, self.w.poll_wait))

    def start_hold_locked(self) -> None:
        self.hold_timer = threading.Timer(_POLL_ACK_HOLD, self.hold_ended)
        self.hold_timer.daemon = True
        self.hold_timer.start()

    def stop_hold_locked(self) -> None:
        if self.hold_timer is not None:
            self.hold_timer.cancel()
            self.hold_timer = None

    def hold_ended(self) -> None:
        """The hold of acks ran out. While the poller waits for room worth a poll
        (and a second poll may go), the acks go with a poll now, whatever its
        size; else alone."""
        with self.cond:
            self.hold_timer = None
            if self.room.deferred and self.room.in_flight < MAX_POLLS_IN_FLIGHT and not self.poller_gone:
                self.room.force_poll = True
                self.cond.notify_all()
                return
        self.flush_poll_acks()

    def flush_poll_acks(self) -> None:
        """Sends the acks held for the next poll alone: no poll follows at once."""
        with self.cond:
            self.stop_hold_locked()
            acks, self.poll_acks = self.poll_acks, []
        self.ack_alone(acks)

    def sleep_unless_stopping(self, d: float) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.poll_stop, timeout=d)

    def ack_item(self, j: Job) -> dict[str, Any]:
        item: dict[str, Any] = {"task_id": j.id, "lease_token": j._lease_token}
        if j._result is not UNSET:
            item["result"] = j._result
        return item

    def settle_poll_acks(self, jobs: list[Job], results: list[Any] | None) -> None:
        if not jobs:
            return
        if results is None or len(results) != len(jobs):
            self.ack_alone(jobs)  # their fate is unknown: ack them alone, with retries
            return
        for j, r in zip(jobs, results):
            if r.error:
                log.warning("worker %s: ack of task %s refused (%s): the lease was lost, so another worker "
                            "may run the task", self.id, j.id, r.error)
            self.done(j)

    def ack_alone(self, jobs: list[Job]) -> None:
        if not jobs:
            return

        def send() -> None:
            for j in jobs:
                self.ack(j)
        threading.Thread(target=send, name="taskforge-ack", daemon=True).start()

    # --- jobs ------------------------------------------------------------------------

    def start_job(self, t: PolledTask, recv: float, date: datetime | None) -> None:
        j = Job(self, t, recv, date)
        with self.cond:
            self.active.add(j)
            self.waiting.append(j)
            started = self.start_waiting_locked()
        self.launch(started)
        with self.hb_cond:
            if j._hb_interval < self.hb_interval:
                self.hb_interval = j._hb_interval  # heartbeat sooner than planned
                self.hb_reset = True
            self.hb_cond.notify()

    def start_waiting_locked(self) -> list[Job]:
        """Moves prefetched jobs into free slots; the caller launches them once it
        has released the lock."""
        started = []
        while self.waiting and self.running < self.w.concurrency and not self.handing_back:
            j = self.waiting.pop(0)
            j.state = _RUNNING
            self.running += 1
            started.append(j)
        return started

    def launch(self, jobs: list[Job]) -> None:
        """Hands jobs to idle task threads, starting new ones when none is idle."""
        for j in jobs:
            self.jobq.put(j)
            with self.lock:
                spawn = self.idle_threads == 0
                if not spawn:
                    self.idle_threads -= 1
            if spawn:
                t = threading.Thread(target=self.task_thread, name="taskforge-task", daemon=True)
                self.task_threads.append(t)
                t.start()

    def task_thread(self) -> None:
        while True:
            j = self.jobq.get()
            if j is None:
                return
            try:
                self.execute(j)
            except Exception:  # noqa: BLE001 - a bug here must not take the thread's slot count with it
                log.exception("worker %s: task %s: unexpected error in the runtime", self.id, j.id)
            with self.lock:
                self.idle_threads += 1

    def execute(self, j: Job) -> None:
        h = self.handlers.get(j.queue)
        began = time.monotonic()
        started = not j.stopping
        err: BaseException | None = None
        result: Any = None
        if not started:
            err = RetryableError(f"not started: {j.stop_reason}")
        elif h is None:
            err = PermanentError(f"worker {self.id} has no handler for queue {j.queue!r}")
        else:
            try:
                result = h(j)
            except BaseException as e:  # noqa: BLE001 - every handler failure is reported, even SystemExit
                err = e
        if err is None and result is not None:
            try:
                size = len(json.dumps(result, separators=(",", ":")))
                j._result = result
            except (TypeError, ValueError) as e:
                err = PermanentError(f"result is not JSON: {e}")
                size = 0
        else:
            size = 0
        if not j._claim():
            return  # shutdown handed the task back already
        ran = max(time.monotonic() - began, 1e-9) if started else 0.0
        handed = self.handler_returned(j, ran, err is None and not j.lost and size <= _MAX_POLL_ACK_RESULT)
        j._hb_stopped = True
        if handed:
            return  # the next poll carries the ack
        if j.lost:
            log.warning("worker %s: task %s not reported: its lease was lost, so another worker may run it",
                        self.id, j.id)
        elif err is None:
            self.ack(j)  # marks j done once delivered
            return
        elif isinstance(err, Snooze):
            self.snooze(j, err.delay)
        else:
            self.nack(j, err)
        self.done(j)

    def handler_returned(self, j: Job, ran: float, ack_by_poll: bool) -> bool:
        """Frees j's slot while its outcome is reported, starts the next waiting
        task in it, and folds the handler's duration into the average that decides
        whether to prefetch. When ack_by_poll is set and a poll is coming (the
        poller is idle, so the freed slot sets one off; or a poll is out or
        deferred, and either carries acks or the queue had work), j's ack is held
        for it and this returns True."""
        handed = False
        with self.cond:
            self.room.ran(ran)
            if j in self.active and j.state == _RUNNING:
                j.state = _REPORTING
                self.running -= 1
                self.reporting += 1
                room = self.room
                poll_coming = self.poller_idle or (
                    (room.in_flight > 0 or room.deferred) and (self.ack_polls_out > 0 or not room.last_short))
                if (ack_by_poll and poll_coming and not self.poller_gone
                        and len(self.poll_acks) < _MAX_POLL_TASKS):
                    self.poll_acks.append(j)
                    handed = True
                    if not self.poller_idle and self.ack_polls_out == 0 and self.hold_timer is None:
                        # The poll out may wait for work, or the poller for room:
                        # do not hold the ack for long.
                        self.start_hold_locked()
            started = self.start_waiting_locked()
            if (self.running < self.w.concurrency and not self.waiting and not self.room.last_short
                    and not self.handing_back):
                # A slot idles while the queue has work: the prefetch room did not
                # last until the next poll's answer.
                self.room.starved = True
            self.cond.notify_all()
        self.launch(started)
        return handed

    def done(self, j: Job) -> None:
        with self.cond:
            if j in self.active:
                if j.state == _WAITING:
                    self.waiting.remove(j)
                elif j.state == _RUNNING:
                    self.running -= 1
                else:
                    self.reporting -= 1
                self.active.discard(j)
            started = self.start_waiting_locked()
            self.cond.notify_all()
        self.launch(started)

    # --- reports ---------------------------------------------------------------------

    def send(self, j: Job, what: str, call: Callable[[], Any]) -> None:
        """Makes a report, retrying through outages until the lease has surely
        expired (the server then retries the task itself) or shutdown gives up."""
        b = _Backoff(self.w.retry_min, self.w.retry_max)
        while True:
            try:
                call()
                return
            except LeaseLost as e:
                log.warning("worker %s: %s of task %s refused: the lease was lost, so another worker may run "
                            "the task: %s", self.id, what, j.id, e)
                return
            except APIError as e:
                if self.bg_stop.is_set():
                    log.error("worker %s: %s of task %s abandoned: the worker stopped; the server will retry "
                              "the task when its lease expires: %s", self.id, what, j.id, e)
                    return
                if not _temporary(e):
                    log.error("worker %s: %s of task %s failed: %s", self.id, what, j.id, e)
                    return
                if j._lease_expired(time.monotonic()):
                    log.error("worker %s: %s of task %s abandoned: the lease expired meanwhile; the server "
                              "will retry the task: %s", self.id, what, j.id, e)
                    return
                d = b.next()
                log.warning("worker %s: %s of task %s failed; retrying in %.2fs: %s", self.id, what, j.id, d, e)
                self.bg_stop.wait(d)

    def nack(self, j: Job, err: BaseException) -> None:
        retryable = not isinstance(err, PermanentError)
        retry_after_ms: int | None = None
        if isinstance(err, RetryableError) and err.retry_after is not None:
            retry_after_ms = round(err.retry_after * 1000)
        if isinstance(err, (RetryableError, PermanentError)):
            text = str(err) or type(err).__name__
        elif isinstance(err, TaskCancelled):
            text = "cancelled while executing"
        else:
            text = f"{type(err).__name__}: {err}\n\n" + "".join(traceback.format_exception(err))
        if len(text) > _MAX_ERROR_TEXT:
            text = text[:_MAX_ERROR_TEXT] + "\n… (truncated)"
        self.send(j, "nack", lambda: self.c.nack(self.id, j.id, j._lease_token, text, retryable=retryable,
                                                 retry_after_ms=retry_after_ms))

    def snooze(self, j: Job, delay: float) -> None:
        reason = f"snoozed for {delay:g}s by worker {self.id}"
        ms = max(round(delay * 1000), 1)

        def call() -> None:
            try:
                self.c.release(self.id, j.id, j._lease_token, reason=reason, delay_ms=ms)
            except NotFound:  # a server without /workers/release: a nack spends a retry
                self.c.nack(self.id, j.id, j._lease_token, reason, retry_after_ms=ms)
        self.send(j, "snooze", call)

    def ack(self, j: Job) -> None:
        """Acks j; acks of tasks finishing while a batch is in flight go together."""
        with self.ack_lock:
            self.ack_queue.append(j)
            if self.ack_sending:
                return  # the sender in flight takes it
            self.ack_sending = True
        while True:
            with self.ack_lock:
                batch = self.ack_queue[:_MAX_POLL_TASKS]
                del self.ack_queue[:_MAX_POLL_TASKS]
                if not batch:
                    self.ack_sending = False
                    return
            self.ack_batch(batch)

    def ack_batch(self, batch: list[Job]) -> None:
        if len(batch) == 1:
            self.ack_one(batch[0])
            self.done(batch[0])
            return
        try:
            results = self.c.ack_batch_minimal(self.id, [self.ack_item(j) for j in batch])
        except TaskForgeError:  # an error answer, no answer, or one that does not match
            results = None
        for i, j in enumerate(batch):
            if results is None:
                self.ack_one(j)  # not delivered as a batch: one by one, with retries
            elif results[i].error:
                log.warning("worker %s: ack of task %s refused (%s): the lease was lost", self.id, j.id,
                            results[i].error)
            self.done(j)

    def ack_one(self, j: Job) -> None:
        too_large: list[PayloadTooLarge] = []

        def call() -> None:
            try:
                self.c.ack(self.id, j.id, j._lease_token, j._result)
            except PayloadTooLarge as e:
                too_large.append(e)
        self.send(j, "ack", call)
        if too_large:  # the same result would be refused every time
            self.send(j, "nack", lambda: self.c.nack(self.id, j.id, j._lease_token,
                                                     f"result refused: {too_large[0]}", retryable=False))

    # --- heartbeats ------------------------------------------------------------------

    def heartbeat(self, j: Job, progress: Any = UNSET) -> None:
        """One heartbeat of j (with progress, when given); takes in the lease it
        confirms. Raises what the server answered."""
        try:
            l = self.c.heartbeat(self.id, j.id, j._lease_token, progress=progress,
                                 timeout=max(j._hb_interval, 1.0))
        except LeaseLost:
            j.lost = True
            self.lease_refused(j, "lease lost")
            raise
        j._extend(time.monotonic(), l.lease_expires_at, l.date)
        if l.cancel_requested:
            j._signal_stop(TaskCancelled(f"task {j.id} was cancelled"))

    def beat(self, j: Job) -> None:
        try:
            if j._hb_stopped:
                return
            self.heartbeat(j)
        except LeaseLost:
            if not j._hb_stopped:  # after the handler returned, a 409 may just mean it was acked
                log.warning("worker %s: lease of task %s lost; handler told to stop", self.id, j.id)
        except APIError as e:
            self.heartbeat_failed(j, e)
        finally:
            j._hb_inflight = False

    def heartbeat_loop(self) -> None:
        next_round = time.monotonic() + self.hb_interval
        while not self.bg_stop.is_set():
            now = time.monotonic()
            with self.hb_cond:
                interval = self.hb_interval
                if self.hb_reset:
                    next_round, self.hb_reset = min(next_round, now + interval), False
            with self.lock:
                jobs = [j for j in self.active if not j._hb_stopped]
            wake = next_round
            for j in jobs:
                if j._timeout_at and now >= j._timeout_at:
                    j._signal_stop(TaskTimedOut(f"task {j.id}: timeout of {j.timeout_seconds}s exceeded"))
                elif j._timeout_at:
                    wake = min(wake, j._timeout_at)
            if now >= next_round:
                next_round = now + interval
                beating = [j for j in jobs if not j.lost]
                for i in range(0, len(beating), _MAX_HEARTBEAT_BATCH):
                    self.beat_round(beating[i:i + _MAX_HEARTBEAT_BATCH], interval)
                continue
            with self.hb_cond:
                if not self.hb_reset:
                    self.hb_cond.wait(max(wake - time.monotonic(), 0.005))

    def beat_round(self, jobs: list[Job], interval: float) -> None:
        """Extends the leases of jobs: one batch request, or one request each
        against a server without the batch endpoint."""
        if self.hb_single:
            for j in jobs:
                if j._hb_inflight:
                    continue
                j._hb_inflight = True
                try:
                    self.hb_pool.submit(self.beat, j)
                except RuntimeError:  # the pool is shut down
                    return
            return
        try:
            results = self.c.heartbeat_batch(self.id, [(j.id, j._lease_token) for j in jobs],
                                             timeout=max(interval, 1.0))
        except (NotFound, MethodNotAllowed):
            log.info("worker %s: the server has no batch heartbeats; heartbeating each task on its own", self.id)
            self.hb_single = True
            self.beat_round(jobs, interval)
            return
        except Exception as e:  # noqa: BLE001 - unavailable, or an answer this SDK cannot read
            for j in jobs:
                if not (j._owned or j._hb_stopped):
                    self.heartbeat_failed(j, e)
            return
        recv = time.monotonic()
        for j, r in zip(jobs, results):
            if j._owned or j._hb_stopped:
                continue  # the handler returned meanwhile; a refusal may just mean it was acked
            if r.error:
                self.lease_refused(j, f"lease lost ({r.error})")
                log.warning("worker %s: lease of task %s lost; handler told to stop", self.id, j.id)
                continue
            j._extend(recv, r.lease_expires_at, r.date)
            if r.cancel_requested:
                j._signal_stop(TaskCancelled(f"task {j.id} was cancelled"))

    def lease_refused(self, j: Job, detail: str) -> None:
        """Marks j's lease lost. The server ends a lease at the task's timeout, and
        its clock runs ahead of the worker's timer (which starts at the poll's
        answer), so a refusal that close to the timeout is the timeout."""
        j.lost = True
        if j._timeout_at and time.monotonic() >= j._timeout_at - 2 * _LEASE_MARGIN:
            j._signal_stop(TaskTimedOut(f"task {j.id}: timeout of {j.timeout_seconds}s exceeded"))
        else:
            j._signal_stop(LeaseExpired(f"task {j.id}: {detail}"))

    def heartbeat_failed(self, j: Job, e: BaseException) -> None:
        if j._lease_expired(time.monotonic()):
            j.lost = True
            j._signal_stop(LeaseExpired(f"task {j.id}: heartbeats failed until the lease expired"))
            log.warning("worker %s: heartbeats of task %s failed until the lease expired: %s", self.id, j.id, e)
        else:
            log.warning("worker %s: heartbeat of task %s failed; retrying at the next interval: %s", self.id, j.id, e)

    # --- shutdown --------------------------------------------------------------------

    def shutdown(self) -> None:
        with self.cond:
            self.poll_stop = True
            self.cond.notify_all()
        self.pc._t.abort_all()  # abandon an open long poll (not one carrying acks: see apc)
        self.poller.join(timeout=_FINAL_REPORT_TIMEOUT)
        with self.cond:
            self.cond.wait_for(lambda: not self.active, timeout=self.w.shutdown_grace)
            self.handing_back = True  # prefetched tasks not started by now go back too
            left = [(j, j.state == _WAITING) for j in self.active]
        for j, unstarted in left:
            if not j._claim():
                continue  # its handler returned; its report is on the way
            j._hb_stopped = True
            j._signal_stop(WorkerStopping(f"worker {self.id} is stopping"))
            if j.lost:
                self.done(j)
                continue
            why = "before the prefetched task started" if unstarted else "before the handler finished"
            threading.Thread(target=self.hand_back, args=(j, why), name="taskforge-release", daemon=True).start()
        final = threading.Timer(_FINAL_REPORT_TIMEOUT, self.bg_stop.set)
        final.daemon = True
        final.start()
        with self.cond:
            self.cond.wait_for(lambda: not self.active, timeout=_FINAL_REPORT_TIMEOUT + 1)
        final.cancel()
        self.bg_stop.set()
        with self.hb_cond:
            self.hb_cond.notify()
        self.hb_pool.shutdown(wait=False, cancel_futures=True)
        for _ in list(self.task_threads):
            self.jobq.put(None)
        for _ in list(self.poll_threads):
            self.pollq.put(None)
        self.pc.close()
        self.apc.close()

    def hand_back(self, j: Job, why: str) -> None:
        reason = f"worker {self.id} shut down {why}; handed back for another worker"

        def call() -> None:
            try:
                self.c.release(self.id, j.id, j._lease_token, reason=reason)
            except NotFound:  # a server without /workers/release
                self.c.nack(self.id, j.id, j._lease_token, reason, retry_after_ms=0)
        self.send(j, "release", call)
        self.done(j)
