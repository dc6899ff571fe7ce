package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// WorkerConfig tunes a Worker. Zero fields take the defaults.
type WorkerConfig struct {
	// ID names the worker to the server (attempt history, GET /workers). Defaults
	// to "<hostname>-<pid>-<random>". Two processes must not share an id.
	ID string
	// Concurrency is how many tasks run at once. Defaults to 10.
	Concurrency int
	// Prefetch is how many tasks the worker may claim beyond its free slots, so
	// that when a handler returns the next task is already at hand rather than a
	// poll's round trip away. A prefetched task is heartbeated while it waits and
	// starts, in the order claimed, as soon as a slot frees up; its lease and its
	// timeout run from the claim. The worker prefetches only while its handlers
	// run short (a recent average under PrefetchBelow), so a prefetched task never
	// waits long behind a slow one while another worker sits idle. Defaults to 1;
	// a negative value turns prefetching off.
	Prefetch int
	// PrefetchBelow is the average handler duration under which the worker
	// prefetches. Defaults to DefaultPrefetchBelow. Raise it for handlers that take
	// longer but whose next task should still not wait for a poll; every task then
	// waits up to one handler's run at this worker rather than at an idle one.
	PrefetchBelow time.Duration
	// PollWait is how long one long-poll may wait for work (at most 30s).
	// Defaults to 10s.
	PollWait time.Duration
	// ShutdownGrace is how long Run, once its context is cancelled, waits for
	// running handlers before handing their tasks back. Defaults to 10s; a
	// negative value hands them back at once.
	ShutdownGrace time.Duration
	// RetryMin and RetryMax bound the jittered exponential backoff between calls
	// that failed because the server was unreachable or unavailable. Default to
	// 100ms and 5s.
	RetryMin, RetryMax time.Duration
	// Logger receives the worker's warnings and errors. Defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider, when set, wraps each handler call in a "taskforge.handle" span,
	// a child of the task's enqueue span. Without it the handler's context still
	// carries the enqueue's trace context.
	TracerProvider trace.TracerProvider
}

// maxPollTasks and maxPollWait are the server's limits for one poll.
const (
	maxPollTasks = 100
	maxPollWait  = 30 * time.Second
	// finalReportTimeout bounds how long Run keeps trying to report tasks after
	// the grace period.
	finalReportTimeout = 5 * time.Second
	// leaseMargin is how long past its estimated expiry a lease is still
	// assumed to be held.
	leaseMargin = 250 * time.Millisecond
	// maxErrorText keeps a nack's error under the server's 64 KiB limit.
	maxErrorText = 60 << 10
	// maxPollAckResult is the largest result a poll carries with its ack; larger
	// ones go alone, so that a refused result does not fail a poll.
	maxPollAckResult = 16 << 10
)

// DefaultPrefetchBelow is the average handler duration under which a Worker
// prefetches unless WorkerConfig.PrefetchBelow says otherwise: there a poll's round
// trip (a few milliseconds) is a noticeable share of each task, and a prefetched
// task waits at most about that long for a slot.
const DefaultPrefetchBelow = 250 * time.Millisecond

func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.ID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		c.ID = fmt.Sprintf("%s-%d-%s", cmp.Or(host, "worker"), os.Getpid(), hex.EncodeToString(b))
	}
	c.Concurrency = cmp.Or(max(c.Concurrency, 0), 10)
	c.Prefetch = min(cmp.Or(c.Prefetch, 1), maxPollTasks)
	c.PrefetchBelow = cmp.Or(max(c.PrefetchBelow, 0), DefaultPrefetchBelow)
	c.PollWait = min(cmp.Or(max(c.PollWait, 0), 10*time.Second), maxPollWait)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, 10*time.Second)
	c.RetryMin = cmp.Or(max(c.RetryMin, 0), 100*time.Millisecond)
	c.RetryMax = max(cmp.Or(c.RetryMax, 5*time.Second), c.RetryMin)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Worker runs handlers for the tasks of its queues: it long-polls for as many
// tasks as it has free slots (and, while its handlers run short, for one more
// to have at hand: WorkerConfig.Prefetch), heartbeats every task it holds at the
// interval the server advertises, and acks or nacks each one when its handler
// returns.
//
// When the server cannot be reached, polls, heartbeats and reports are retried
// with jittered exponential backoff. A handler whose lease is lost, or whose task
// is cancelled, sees its context cancelled within one heartbeat interval.
type Worker struct {
	c   *Client
	cfg WorkerConfig

	mu       sync.Mutex
	handlers map[string]HandlerFunc
	queues   []string // in registration order: the order polls try them
	running  bool
}

// NewWorker returns a Worker that talks to the server through c. Register
// handlers with Handle, then call Run.
func NewWorker(c *Client, cfg WorkerConfig) *Worker {
	return &Worker{c: c, cfg: cfg.withDefaults(), handlers: map[string]HandlerFunc{}}
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Handle registers h for the tasks of queue. Queues are polled in the order they
// were registered, so the first one registered is served first when several have
// work. It panics when queue already has a handler, h is nil, or Run is running.
func (w *Worker) Handle(queue string, h HandlerFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case h == nil:
		panic("taskforge: nil handler for queue " + queue)
	case w.running:
		panic("taskforge: Handle called while the worker runs")
	case w.handlers[queue] != nil:
		panic("taskforge: queue " + queue + " already has a handler")
	}
	w.handlers[queue] = h
	w.queues = append(w.queues, queue)
}

// Run polls and runs tasks until ctx is cancelled, then shuts down gracefully: it
// stops polling, waits up to ShutdownGrace for running handlers (and the tasks it
// prefetched) to finish and report, then cancels the handlers still running (cause
// ErrWorkerStopping) and releases their tasks, and the prefetched tasks not
// started, so that another worker takes them at once (Client.Release: the attempt
// is recorded as released and does not spend the task's retry budget; a server
// without the release endpoint gets a retryable nack with no delay instead).
// Run returns nil after a shutdown, even if some handler ignores its context; it
// returns an error when no handler is registered, when it is already running, or
// when the server rejects the worker's poll as invalid.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("taskforge: worker is already running")
	}
	if len(w.queues) == 0 {
		w.mu.Unlock()
		return errors.New("taskforge: worker has no handlers; call Handle first")
	}
	w.running = true
	r := &runner{w: w, c: w.c, cfg: w.cfg, log: w.cfg.Logger.With("worker_id", w.cfg.ID),
		handlers: make(map[string]HandlerFunc, len(w.handlers)), queues: append([]string(nil), w.queues...),
		active: map[*job]struct{}{}, slotFreed: make(chan struct{}, 1)}
	for q, h := range w.handlers {
		r.handlers[q] = h
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
	}()
	r.handlerBase = context.WithoutCancel(ctx)
	r.bg, r.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	return r.run(ctx)
}

// runner is one Run of a Worker.
type runner struct {
	w        *Worker
	c        *Client
	cfg      WorkerConfig
	log      *slog.Logger
	handlers map[string]HandlerFunc
	queues   []string

	// handlerBase carries the values of Run's context, not its cancellation:
	// handlers run on through the grace period.
	handlerBase context.Context
	// bg carries heartbeats and reports; it ends only when Run gives up on them.
	bg     context.Context
	stopBG context.CancelFunc

	mu        sync.Mutex
	active    map[*job]struct{} // tasks held: prefetched, running, or being reported
	wg        sync.WaitGroup    // one count per active job
	slotFreed chan struct{}     // signalled when a job leaves active or its handler returns
	waiting   []*job            // prefetched jobs, in the order claimed
	running   int               // active jobs whose handler was started and has not returned
	reporting int               // active jobs whose handler returned (their report is on its way)
	stopping  bool              // shutdown is handing tasks back: start no more
	// A handler returning while the poller is idle leaves its ack to the poll its
	// freed slot sets off (pollAcks), saving a request per task.
	pollerIdle bool
	pollerGone bool // Run's poll loop has ended: acks go alone
	pollAcks   []*job
	avgRun     time.Duration // moving average of handler durations; 0 until one returned

	// Acks of tasks that finish together go out in one batch request.
	ackMu      sync.Mutex
	ackQueue   []*job
	ackSending bool
}

// job is one task held by the worker.
type job struct {
	*Job
	leaseToken  string
	ctx         context.Context // the handler's
	cancel      context.CancelCauseFunc
	stopTimeout context.CancelFunc
	stopHB      chan struct{} // closed when heartbeats must stop
	stopOnce    sync.Once
	owned       atomic.Bool // set by whoever reports the task: its handler's return, or shutdown
	lost        atomic.Bool // the lease is known to be lost
	state       jobState    // guarded by runner.mu

	mu       sync.Mutex
	leaseLen time.Duration // estimated lease length; zero when unknown
	deadline time.Time     // local estimate of the lease's expiry; zero when unknown
}

// jobState is where a held job stands.
type jobState int

const (
	jobWaiting   jobState = iota // prefetched: claimed, its handler not started
	jobRunning                   // its handler runs
	jobReporting                 // its handler returned; the report is on its way
)

// claim makes the caller the one who reports the task; false if someone already is.
func (j *job) claim() bool { return j.owned.CompareAndSwap(false, true) }

func (j *job) stopHeartbeats() { j.stopOnce.Do(func() { close(j.stopHB) }) }

// extend records a lease confirmed by a response received at recv, from the
// server's expiry and the response's Date header.
func (j *job) extend(recv, expires, date time.Time) {
	if date.IsZero() || expires.IsZero() {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	// Date is truncated to the second and recv follows the server's answer, so
	// the estimate errs late (by under a second plus the network delay): the
	// worker never gives up on a lease the server still honours.
	if l := expires.Sub(date); l > 0 {
		j.leaseLen = l
		j.deadline = recv.Add(l)
	}
}

// leaseExpired reports whether the lease has surely expired by now (the estimate
// already errs late; leaseMargin adds to that).
func (j *job) leaseExpired(now time.Time) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return !j.deadline.IsZero() && now.After(j.deadline.Add(leaseMargin))
}

func (r *runner) run(ctx context.Context) error {
	b := newBackoff(r.cfg.RetryMin, r.cfg.RetryMax)
	var fatal error
	for ctx.Err() == nil {
		want, prefetch, acks := r.nextPoll()
		if want <= 0 {
			r.ackAlone(acks)
			select {
			case <-r.slotFreed:
			case <-ctx.Done():
			}
			continue
		}
		sent := time.Now()
		res, date, err := r.c.poll(ctx, PollRequest{WorkerID: r.cfg.ID, Queues: r.queues,
			MaxTasks: min(want, maxPollTasks), Wait: r.cfg.PollWait, Prefetch: prefetch, Acks: ackItems(acks)})
		recv := time.Now()
		r.settlePollAcks(acks, res, err)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrMethodNotAllowed) {
				fatal = fmt.Errorf("taskforge worker %s: %w", r.cfg.ID, err)
				break
			}
			d := b.next()
			r.log.Warn("poll failed; retrying", "in", d, "err", err)
			sleep(ctx, d)
			continue
		}
		b.reset()
		for _, t := range res.Tasks {
			r.start(t, recv, date)
		}
		if len(res.Tasks) == 0 && res.RetryAfter > 0 && time.Since(sent) < r.cfg.PollWait/2 {
			// A rate limit holds the work back and the server answered early: wait
			// for the next token rather than ask again at once.
			sleep(ctx, min(res.RetryAfter, r.cfg.PollWait))
		}
	}
	r.mu.Lock()
	r.pollerGone = true
	acks := r.pollAcks
	r.pollAcks = nil
	r.mu.Unlock()
	r.ackAlone(acks)
	r.shutdown()
	return fatal
}

// nextPoll is what the next poll asks for: how many tasks (see pollSizeLocked), and the
// acks it carries. With nothing to ask for, the poller is idle until a slot frees,
// and a handler returning meanwhile leaves its ack to the poll that follows.
func (r *runner) nextPoll() (want int, prefetch bool, acks []*job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	want, prefetch = r.pollSizeLocked()
	r.pollerIdle = want <= 0
	acks, r.pollAcks = r.pollAcks, nil
	return want, prefetch, acks
}

// ackItems are the acks of jobs.
func ackItems(jobs []*job) []AckItem {
	if len(jobs) == 0 {
		return nil
	}
	items := make([]AckItem, len(jobs))
	for i, j := range jobs {
		items[i] = AckItem{TaskID: j.ID, LeaseToken: j.leaseToken, Result: j.result}
	}
	return items
}

// settlePollAcks marks the jobs whose acks a poll carried done, or when the poll
// failed (and so their fate is unknown), acks them the standalone way, with retries.
func (r *runner) settlePollAcks(jobs []*job, res *PollResult, err error) {
	if len(jobs) == 0 {
		return
	}
	if err != nil {
		r.ackAlone(jobs)
		return
	}
	for i, j := range jobs {
		if e := res.Acks[i].Err; e != nil {
			r.log.Warn("ack refused: the lease was lost, so another worker may run the task",
				"task_id", j.ID, "queue", j.Queue, "attempt", j.Attempt, "err", e)
		}
		r.done(j)
	}
}

// ackAlone acks jobs in requests of their own (batched when several are queued).
func (r *runner) ackAlone(jobs []*job) {
	if len(jobs) == 0 {
		return
	}
	go func() {
		for _, j := range jobs {
			r.ack(j)
		}
	}()
}

// pollSizeLocked is how many tasks the next poll asks for: the free slots, or when
// every slot is taken, the room left for prefetched tasks (prefetch is then true).
// Tasks whose handler returned but whose ack or nack is still on its way hold no
// slot, so the next poll overlaps with their report. r.mu is held.
func (r *runner) pollSizeLocked() (n int, prefetch bool) {
	if free := r.cfg.Concurrency - r.running - len(r.waiting); free > 0 {
		return free, false
	}
	if r.cfg.Prefetch <= 0 || r.avgRun == 0 || r.avgRun >= r.cfg.PrefetchBelow {
		return 0, false
	}
	return r.cfg.Prefetch - len(r.waiting), true
}

// handlerReturned frees j's slot while its outcome is reported, starts the next
// prefetched task in it, and folds the handler's duration ran into the average
// that decides whether to prefetch (ran is 0 when the handler did not run). When
// ackByPoll is set and the poller is idle, the poll the freed slot sets off carries
// j's ack; handlerReturned then returns true, and the poller marks j done.
func (r *runner) handlerReturned(j *job, ran time.Duration, ackByPoll bool) (handed bool) {
	r.mu.Lock()
	switch {
	case ran <= 0: // the handler did not run
	case r.avgRun == 0:
		r.avgRun = ran
	default:
		r.avgRun += (ran - r.avgRun) / 5
	}
	if _, ok := r.active[j]; ok && j.state == jobRunning {
		j.state = jobReporting
		r.running--
		r.reporting++
		if ackByPoll && r.pollerIdle && !r.pollerGone && len(r.pollAcks) < maxPollTasks {
			r.pollAcks = append(r.pollAcks, j)
			handed = true
		}
	}
	r.startWaitingLocked()
	r.mu.Unlock()
	select {
	case r.slotFreed <- struct{}{}:
	default:
	}
	return handed
}

// startWaitingLocked starts prefetched tasks while slots are free. r.mu is held.
func (r *runner) startWaitingLocked() {
	for len(r.waiting) > 0 && r.running < r.cfg.Concurrency && !r.stopping {
		j := r.waiting[0]
		r.waiting[0] = nil
		r.waiting = r.waiting[1:]
		j.state = jobRunning
		r.running++
		go r.execute(j)
	}
}

// start heartbeats t and runs its handler, at once when a slot is free and
// otherwise (a prefetched task) when one frees up.
func (r *runner) start(t PolledTask, recv, date time.Time) {
	j := &job{Job: &Job{ID: t.ID, Queue: t.Queue, Payload: t.Payload, Priority: t.Priority,
		Attempt: t.Attempt, WorkerID: r.cfg.ID}, leaseToken: t.LeaseToken, stopHB: make(chan struct{})}
	j.extend(recv, t.LeaseExpiresAt, date)
	j.report = func(ctx context.Context, progress json.RawMessage) error { return r.reportProgress(ctx, j, progress) }
	if t.WorkflowID != nil && t.Step != nil {
		j.WorkflowID, j.Step = *t.WorkflowID, *t.Step
	}
	base := r.handlerBase
	if t.Traceparent != nil {
		j.Traceparent = *t.Traceparent
		base = propagation.TraceContext{}.Extract(base, propagation.MapCarrier{"traceparent": *t.Traceparent})
	}
	ctx, cancel := context.WithCancelCause(base)
	j.cancel = cancel
	j.stopTimeout = func() {}
	if t.TimeoutSeconds != nil && *t.TimeoutSeconds > 0 {
		// The server's deadline runs from the claim, so a prefetched task's does too.
		j.Timeout = time.Duration(*t.TimeoutSeconds) * time.Second
		ctx, j.stopTimeout = context.WithDeadlineCause(ctx, recv.Add(j.Timeout),
			fmt.Errorf("task timeout of %s exceeded: %w", j.Timeout, context.DeadlineExceeded))
	}
	j.ctx = ctx

	interval := time.Duration(t.HeartbeatIntervalMs) * time.Millisecond
	if interval <= 0 {
		interval = cmp.Or(j.leaseLen/3, 10*time.Second)
	}
	r.mu.Lock()
	r.active[j] = struct{}{}
	r.wg.Add(1)
	r.waiting = append(r.waiting, j)
	r.startWaitingLocked()
	r.mu.Unlock()
	go r.heartbeat(j, interval)
}

// execute runs the handler and reports its outcome, unless shutdown took the task.
// A task cancelled, or whose lease was lost, while it waited is reported without
// running its handler.
func (r *runner) execute(j *job) {
	defer j.stopTimeout()
	ctx := j.ctx
	h := r.handlers[j.Queue]
	began, started := time.Now(), ctx.Err() == nil
	var err error
	if !started {
		err = fmt.Errorf("not started: %w", context.Cause(ctx))
	} else if h == nil {
		err = Permanent(fmt.Errorf("worker %s has no handler for queue %q", r.cfg.ID, j.Queue))
	} else if r.cfg.TracerProvider != nil {
		spanCtx, span := r.cfg.TracerProvider.Tracer("github.com/taskforge/taskforge/client").Start(ctx, "taskforge.handle",
			trace.WithAttributes(attribute.String("taskforge.task_id", j.ID), attribute.String("taskforge.queue", j.Queue),
				attribute.Int("taskforge.attempt", j.Attempt)))
		err = invoke(spanCtx, h, j.Job)
		if err != nil && !isSnooze(err) {
			span.RecordError(err)
			span.SetStatus(otelcodes.Error, err.Error())
		}
		span.End()
	} else {
		err = invoke(ctx, h, j.Job)
	}
	if !j.claim() {
		return // shutdown handed the task back already
	}
	ackByPoll := err == nil && !j.lost.Load() && len(j.result) <= maxPollAckResult
	var ran time.Duration // 0: the handler did not run
	if started {
		ran = max(time.Since(began), time.Nanosecond)
	}
	handed := r.handlerReturned(j, ran, ackByPoll)
	j.stopHeartbeats()
	cause := context.Cause(ctx)
	j.cancel(context.Canceled)
	if handed {
		return // the next poll carries the ack
	}
	log := r.log.With("task_id", j.ID, "queue", j.Queue, "attempt", j.Attempt)
	switch {
	case j.lost.Load():
		log.Warn("task not reported: its lease was lost, so another worker may run it", "handler_err", err)
	case err == nil:
		r.ack(j) // marks j done once the ack is delivered
		return
	case isSnooze(err):
		d, _ := SnoozeDelay(err)
		r.snooze(j, log, d)
	default:
		n := NackRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken,
			Error: errorText(err), Permanent: IsPermanent(err)}
		if d, ok := RetryDelay(err); ok {
			n.RetryAfter = &d
		}
		if errors.Is(cause, ErrTaskCancelled) && errors.Is(err, context.Canceled) {
			n.Error = "cancelled while executing"
		}
		r.send(j, log, "nack", func(ctx context.Context) error {
			_, err := r.c.Nack(ctx, n)
			return err
		})
	}
	r.done(j)
}

// isSnooze reports whether a handler's err asks for a snooze.
func isSnooze(err error) bool {
	_, ok := SnoozeDelay(err)
	return ok
}

// snooze releases j for d: back after d, without spending a retry. A server
// without the release endpoint gets a retryable nack with that delay instead,
// which does spend one.
func (r *runner) snooze(j *job, log *slog.Logger, d time.Duration) {
	reason := fmt.Sprintf("snoozed for %s by worker %s", d, r.cfg.ID)
	r.send(j, log, "snooze", func(ctx context.Context) error {
		_, err := r.c.Release(ctx, ReleaseRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken,
			Reason: reason, Delay: max(d, time.Millisecond)})
		if errors.Is(err, ErrNotFound) {
			_, err = r.c.Nack(ctx, NackRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken,
				Error: reason, RetryAfter: &d})
		}
		return err
	})
}

// reportProgress sends a heartbeat of j carrying progress, and takes in the lease
// it confirms as the periodic heartbeat does.
func (r *runner) reportProgress(ctx context.Context, j *job, progress json.RawMessage) error {
	if j.lost.Load() {
		return ErrLeaseLost
	}
	l, date, err := r.c.heartbeatWith(ctx, r.cfg.ID, j.ID, j.leaseToken, progress)
	recv := time.Now()
	switch {
	case err == nil:
		j.extend(recv, l.ExpiresAt, date)
		if l.CancelRequested {
			j.cancel(ErrTaskCancelled)
		}
	case errors.Is(err, ErrLeaseLost):
		j.lost.Store(true)
		j.cancel(ErrLeaseLost)
	}
	return err
}

// ack reports j done. Acks of tasks finishing while another batch is in flight are
// sent together (POST /workers/ack/batch): the first caller to find no batch in
// flight sends everything queued, batch after batch. An ack the batch could not
// deliver goes the single-ack way, with its retries.
func (r *runner) ack(j *job) {
	r.ackMu.Lock()
	r.ackQueue = append(r.ackQueue, j)
	lead := !r.ackSending
	r.ackSending = true
	r.ackMu.Unlock()
	if !lead {
		return // the sender in flight takes it (and reports it done)
	}
	for {
		r.ackMu.Lock()
		n := min(len(r.ackQueue), maxPollTasks)
		if n == 0 {
			r.ackSending = false
			r.ackMu.Unlock()
			return
		}
		batch := r.ackQueue[:n:n]
		r.ackQueue = r.ackQueue[n:]
		r.ackMu.Unlock()
		r.ackBatch(batch)
	}
}

// ackBatch sends one batch of acks and marks each job done.
func (r *runner) ackBatch(batch []*job) {
	logOf := func(j *job) *slog.Logger {
		return r.log.With("task_id", j.ID, "queue", j.Queue, "attempt", j.Attempt)
	}
	if len(batch) == 1 {
		r.ackOne(batch[0], logOf(batch[0]))
		r.done(batch[0])
		return
	}
	items := make([]AckItem, len(batch))
	for i, j := range batch {
		items[i] = AckItem{TaskID: j.ID, LeaseToken: j.leaseToken, Result: j.result}
	}
	ctx, cancel := context.WithTimeout(r.bg, 10*time.Second)
	results, err := r.c.AckBatch(ctx, r.cfg.ID, items)
	cancel()
	for i, j := range batch {
		switch {
		case err != nil: // not delivered as a batch: one by one, with retries
			r.ackOne(j, logOf(j))
		case results[i].Err != nil:
			logOf(j).Warn("ack refused: the lease was lost, so another worker may run the task", "err", results[i].Err)
		}
		r.done(j)
	}
}

// ackOne acks j alone, retrying through outages.
func (r *runner) ackOne(j *job, log *slog.Logger) {
	var tooLarge error
	r.send(j, log, "ack", func(ctx context.Context) error {
		_, err := r.c.Ack(ctx, r.cfg.ID, j.ID, j.leaseToken, j.result)
		if errors.Is(err, ErrPayloadTooLarge) {
			tooLarge = err
			return nil
		}
		return err
	})
	if tooLarge != nil {
		// The same result would be refused on every attempt.
		r.send(j, log, "nack", func(ctx context.Context) error {
			_, err := r.c.Nack(ctx, NackRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken,
				Error: "result refused: " + tooLarge.Error(), Permanent: true})
			return err
		})
	}
}

// invoke calls h, turning a panic into an error that carries the stack.
func invoke(ctx context.Context, h HandlerFunc, j *Job) (err error) {
	defer func() {
		if rec := recover(); rec != nil {
			err = &panicError{value: rec, stack: debug.Stack()}
		}
	}()
	return h(ctx, j)
}

// errorText is err's message, cut to fit the server's limit.
func errorText(err error) string {
	s := err.Error()
	if len(s) > maxErrorText {
		s = s[:maxErrorText] + "\n… (truncated)"
	}
	if s == "" {
		s = fmt.Sprintf("%T with an empty message", err)
	}
	return s
}

// send makes a report (ack or nack), retrying with backoff while the server is
// unreachable or unavailable, until the lease has surely expired (the server then
// retries the task itself) or Run gives up at the end of its shutdown.
func (r *runner) send(j *job, log *slog.Logger, what string, call func(context.Context) error) {
	b := newBackoff(r.cfg.RetryMin, r.cfg.RetryMax)
	for {
		ctx, cancel := context.WithTimeout(r.bg, 10*time.Second)
		err := call(ctx)
		cancel()
		switch {
		case err == nil:
			return
		case errors.Is(err, ErrLeaseLost):
			log.Warn(what+" refused: the lease was lost, so another worker may run the task", "err", err)
			return
		case r.bg.Err() != nil:
			log.Error(what+" abandoned: the worker stopped; the server will retry the task when its lease expires", "err", err)
			return
		case !temporary(err) && !errors.Is(err, context.DeadlineExceeded):
			log.Error(what+" failed", "err", err)
			return
		case j.leaseExpired(time.Now()):
			log.Error(what+" abandoned: the lease expired meanwhile; the server will retry the task", "err", err)
			return
		}
		d := b.next()
		log.Warn(what+" failed; retrying", "in", d, "err", err)
		sleep(r.bg, d)
	}
}

// heartbeat extends j's lease every interval until its heartbeats are stopped,
// cancelling the handler when the task is cancelled or the lease is lost.
func (r *runner) heartbeat(j *job, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	log := r.log.With("task_id", j.ID, "queue", j.Queue, "attempt", j.Attempt)
	for {
		select {
		case <-j.stopHB:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(r.bg, interval)
		l, date, err := r.c.heartbeat(ctx, r.cfg.ID, j.ID, j.leaseToken)
		cancel()
		recv := time.Now()
		select {
		case <-j.stopHB:
			return // the handler returned meanwhile; a 409 may just mean it was acked
		default:
		}
		switch {
		case err == nil:
			j.extend(recv, l.ExpiresAt, date)
			if l.CancelRequested {
				j.cancel(ErrTaskCancelled)
			}
		case errors.Is(err, ErrLeaseLost):
			j.lost.Store(true)
			j.cancel(ErrLeaseLost)
			log.Warn("lease lost; handler cancelled", "err", err)
			return
		case j.leaseExpired(time.Now()):
			j.lost.Store(true)
			j.cancel(ErrLeaseLost)
			log.Warn("heartbeats failed until the lease expired; handler cancelled", "err", err)
			return
		default:
			log.Warn("heartbeat failed; retrying at the next interval", "err", err)
		}
	}
}

// done forgets j, releasing its slot.
func (r *runner) done(j *job) {
	r.mu.Lock()
	if _, ok := r.active[j]; ok {
		switch j.state {
		case jobWaiting:
			r.waiting = slices.DeleteFunc(r.waiting, func(w *job) bool { return w == j })
		case jobRunning:
			r.running--
		case jobReporting:
			r.reporting--
		}
		delete(r.active, j)
		r.startWaitingLocked()
	}
	r.mu.Unlock()
	r.wg.Done()
	select {
	case r.slotFreed <- struct{}{}:
	default:
	}
}

// shutdown waits up to the grace period for the active tasks, then hands back the
// ones still running, and waits (bounded) for every report to finish.
func (r *runner) shutdown() {
	defer r.stopBG()
	idle := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(idle)
	}()
	if grace := r.cfg.ShutdownGrace; grace > 0 {
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-idle:
			return
		case <-timer.C:
		}
	}
	r.mu.Lock()
	r.stopping = true // prefetched tasks not started by now are handed back too
	var left []*job
	unstarted := map[*job]bool{}
	for j := range r.active {
		left = append(left, j)
		unstarted[j] = j.state == jobWaiting
	}
	r.mu.Unlock()
	for _, j := range left {
		if !j.claim() {
			continue // its handler returned; its report is on the way
		}
		j.stopHeartbeats()
		j.cancel(ErrWorkerStopping)
		if j.lost.Load() {
			r.done(j)
			continue
		}
		go func() {
			log := r.log.With("task_id", j.ID, "queue", j.Queue, "attempt", j.Attempt)
			zero := time.Duration(0)
			why := "before the handler finished"
			if unstarted[j] {
				why = "before the prefetched task started"
			}
			reason := fmt.Sprintf("worker %s shut down %s; handed back for another worker", r.cfg.ID, why)
			r.send(j, log, "release", func(ctx context.Context) error {
				_, err := r.c.Release(ctx, ReleaseRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken, Reason: reason})
				if errors.Is(err, ErrNotFound) { // a server older than /workers/release
					_, err = r.c.Nack(ctx, NackRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken,
						Error: reason, RetryAfter: &zero})
				}
				return err
			})
			r.done(j)
		}()
	}
	final := time.AfterFunc(finalReportTimeout, r.stopBG)
	defer final.Stop()
	<-idle
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
