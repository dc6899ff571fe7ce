package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
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
	// poll's round trip away. One poll asks for the free slots and the prefetch
	// room together (a capped queue fills only the free slots). A prefetched task
	// is heartbeated while it waits and starts, in the order claimed, as soon as a
	// slot frees up; its lease and its timeout run from the claim. The worker
	// prefetches only while its handlers run short (a recent average under
	// PrefetchBelow), so a prefetched task never waits long behind a slow one while
	// another worker sits idle. Defaults to Concurrency (at most 100), and then
	// adapts: while polls come back full after the handlers ran out of tasks
	// before their answer (handlers outrunning polls), the room doubles, up to
	// 200 tasks with the slots; it shrinks again while tasks are still waiting
	// when a poll comes back, and falls back to the default when a poll comes
	// back short. A value set is kept as is (at most 100); a negative value
	// turns prefetching off.
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
	// Clock is the time the worker estimates leases, paces heartbeats and times
	// its handlers by (PrefetchBelow compares with the latter). Defaults to the
	// wall clock; a test may pass its own to see a lease run out, or a handler run
	// long, without waiting for it.
	Clock Clock
	// OnPark, when set, is called each time the poller parks with no poll out
	// (every slot and the prefetch room taken, or too little of it free to be
	// worth a poll while prefetched tasks wait): from then until a slot frees, a
	// handler that returns leaves its ack to the next poll. It is a hook for
	// tests and diagnostics, called on the poller's goroutine: it must not block.
	OnPark func()
	// OnEvent, when set, is told of each step of the worker that may have changed
	// what the server or its handlers hold (see WorkerEvent): a test waits on these
	// steps rather than polling the server on a timer. It is called on the
	// worker's goroutines, concurrently: it must be safe for that and not block.
	OnEvent func(WorkerEvent)
}

// WorkerEvent is one step of a Worker's work, told to WorkerConfig.OnEvent after
// it happened: once it is told, what it changed can be seen at the server.
type WorkerEvent struct {
	Kind WorkerEventKind
	// TaskID is the task concerned; empty for a poll or a heartbeat round.
	TaskID string
	// Err is why a poll or a heartbeat round failed; nil otherwise.
	Err error
}

// WorkerEventKind says what a WorkerEvent is.
type WorkerEventKind int

// The kinds of WorkerEvent.
const (
	// EventPolled: a poll was answered (tasks claimed, acks it carried settled)
	// or failed.
	EventPolled WorkerEventKind = iota + 1
	// EventStarted: a task's handler is about to run.
	EventStarted
	// EventFinished: a task's handler returned (or the task ended unstarted).
	EventFinished
	// EventReported: the worker is done with a task: its outcome was reported,
	// handed back, or given up on.
	EventReported
	// EventHeartbeat: a round of heartbeats was answered or failed.
	EventHeartbeat
)

// String names k.
func (k WorkerEventKind) String() string {
	switch k {
	case EventPolled:
		return "polled"
	case EventStarted:
		return "started"
	case EventFinished:
		return "finished"
	case EventReported:
		return "reported"
	case EventHeartbeat:
		return "heartbeat"
	}
	return fmt.Sprintf("WorkerEventKind(%d)", int(k))
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

// maxWorkerID is the server's limit on a worker id.
const maxWorkerID = 200

// Validate reports the first setting of c that is out of range. Zero values are
// valid: they take the defaults documented on each field.
func (c WorkerConfig) Validate() error {
	switch {
	case len(c.ID) > maxWorkerID:
		return fmt.Errorf("taskforge worker: ID is %d characters; the limit is %d", len(c.ID), maxWorkerID)
	case c.Concurrency < 0:
		return fmt.Errorf("taskforge worker: Concurrency is %d; it must be positive (0 takes the default 10)", c.Concurrency)
	case c.Prefetch > maxPollTasks:
		return fmt.Errorf("taskforge worker: Prefetch is %d; the limit is %d (a negative value turns prefetching off)", c.Prefetch, maxPollTasks)
	case c.PrefetchBelow < 0:
		return fmt.Errorf("taskforge worker: PrefetchBelow is %s; it must not be negative", c.PrefetchBelow)
	case c.PollWait < 0 || c.PollWait > maxPollWait:
		return fmt.Errorf("taskforge worker: PollWait is %s; it must be between 0 and %s", c.PollWait, maxPollWait)
	case c.RetryMin < 0 || c.RetryMax < 0:
		return fmt.Errorf("taskforge worker: RetryMin and RetryMax must not be negative (got %s and %s)", c.RetryMin, c.RetryMax)
	case c.RetryMax > 0 && c.RetryMax < c.RetryMin:
		return fmt.Errorf("taskforge worker: RetryMax %s is below RetryMin %s", c.RetryMax, c.RetryMin)
	}
	return nil
}

// withDefaults fills the zero fields of a valid c.
func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.ID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		c.ID = fmt.Sprintf("%s-%d-%s", cmp.Or(host, "worker"), os.Getpid(), hex.EncodeToString(b))
	}
	c.Concurrency = cmp.Or(c.Concurrency, 10)
	c.Prefetch = cmp.Or(c.Prefetch, min(c.Concurrency, maxPollTasks))
	c.PrefetchBelow = cmp.Or(c.PrefetchBelow, DefaultPrefetchBelow)
	c.PollWait = cmp.Or(c.PollWait, 10*time.Second)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, 10*time.Second)
	c.RetryMin = cmp.Or(c.RetryMin, 100*time.Millisecond)
	c.RetryMax = max(cmp.Or(c.RetryMax, 5*time.Second), c.RetryMin)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	return c
}

// Worker runs handlers for the tasks of its queues: it long-polls for as many
// tasks as it has free slots (and, while its handlers run short, for more to
// have at hand: WorkerConfig.Prefetch), heartbeats every task it holds at the
// interval the server advertises, and acks or nacks each one when its handler
// returns.
//
// When the server cannot be reached, polls, heartbeats and reports are retried
// with jittered exponential backoff. A handler whose lease is lost, or whose task
// is cancelled, sees its context cancelled within one heartbeat interval.
type Worker struct {
	c   *Client
	cfg WorkerConfig

	invalid error // cfg.Validate's verdict, returned by Run
	// autoPrefetch: cfg.Prefetch was left to its default, so the prefetch room adapts.
	autoPrefetch bool

	mu       sync.Mutex
	handlers map[string]HandlerFunc
	queues   []string // in registration order: the order polls try them
	running  bool
}

// NewWorker returns a Worker that talks to the server through c. Register
// handlers with Handle, then call Run, which fails when cfg is not valid (see
// WorkerConfig.Validate).
func NewWorker(c *Client, cfg WorkerConfig) *Worker {
	w := &Worker{c: c, invalid: cfg.Validate(), handlers: map[string]HandlerFunc{}, autoPrefetch: cfg.Prefetch == 0}
	if w.invalid == nil {
		w.cfg = cfg.withDefaults()
	} else {
		w.cfg = cfg
	}
	return w
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
// stops polling (a poll waiting for work is abandoned; one carrying acks, which
// the server answers at once, is waited for), sends the acks it held for the next
// poll, waits up to ShutdownGrace for running handlers (and the tasks it
// prefetched) to finish and report, then cancels the handlers still running (cause
// ErrWorkerStopping) and releases their tasks, and the prefetched tasks not
// started, so that another worker takes them at once (Client.Release: the attempt
// is recorded as released and does not spend the task's retry budget; a server
// without the release endpoint gets a retryable nack with no delay instead).
// Run returns once every ack is committed (its answer received) or its failure
// logged, and those releases are done, at most about 5 s past the grace period.
// Run returns nil after a shutdown, even if some handler ignores its context; it
// returns an error when the configuration is invalid, when no handler is
// registered, when it is already running, or when the server rejects the
// worker's poll as invalid.
func (w *Worker) Run(ctx context.Context) error {
	if w.invalid != nil {
		return w.invalid
	}
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
	handlers := make(map[string]HandlerFunc, len(w.handlers))
	for q, h := range w.handlers {
		handlers[q] = h
	}
	queues := append([]string(nil), w.queues...)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
	}()
	return newRunner(ctx, w, handlers, queues).run(ctx)
}

// A Run is five parts, each in its own file, that share no mutable state but
// through the messages they send:
//
//   - the slot keeper (worker_slots.go), one goroutine that owns which tasks the
//     worker holds and in what state, and so how many the next poll asks for;
//   - the poller (worker_poller.go), Run's own goroutine, which long-polls (up
//     to two polls out at once, each in a goroutine of its own) and hands what
//     they claim to the slot keeper;
//   - executors (worker_executor.go), one goroutine per running handler, started
//     by the slot keeper when a slot frees;
//   - the reporter (worker_reporter.go): acks batched by one goroutine, nacks,
//     snoozes and releases retried through outages;
//   - the heartbeater (worker_heartbeat.go), one goroutine that extends every
//     held lease with one request per interval.

// runner is one Run of a Worker.
type runner struct {
	c        *Client
	cfg      WorkerConfig
	log      *slog.Logger
	clock    Clock
	onPark   func()
	handlers map[string]HandlerFunc
	queues   []string

	// handlerBase carries the values of Run's context, not its cancellation:
	// handlers run on through the grace period.
	handlerBase context.Context
	// bg carries heartbeats and reports; it ends only when Run gives up on them.
	bg     context.Context
	stopBG context.CancelFunc

	slots *slots
	// oldServer: the server refused prefetch_tasks; only the poller touches it.
	oldServer bool
	acks      chan *job      // to the ack sender
	held      sync.WaitGroup // one count per job held, from its claim to its report
	beats     *heartbeater
	stopped   chan struct{} // closed when Run returns: the slot keeper and the ack sender end
}

func newRunner(ctx context.Context, w *Worker, handlers map[string]HandlerFunc, queues []string) *runner {
	r := &runner{c: w.c, cfg: w.cfg, log: w.cfg.Logger.With("worker_id", w.cfg.ID), clock: w.cfg.Clock, onPark: w.cfg.OnPark,
		handlers: handlers, queues: queues, handlerBase: context.WithoutCancel(ctx),
		acks: make(chan *job, maxPollTasks), stopped: make(chan struct{})}
	r.bg, r.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	r.slots = newSlots(w.cfg, w.autoPrefetch, r.execute, func(j *job) {
		r.held.Done()
		r.event(EventReported, j.ID, nil)
	}, r.ackAlone, r.stopped)
	r.beats = newHeartbeater(r)
	return r
}

// run starts the slot keeper, the ack sender and the heartbeater, polls until ctx
// ends, then shuts down.
func (r *runner) run(ctx context.Context) error {
	go r.slots.run()
	go r.sendAcks()
	beatsCtx, stopBeats := context.WithCancel(r.bg)
	beatsDone := make(chan struct{})
	go func() {
		defer close(beatsDone)
		r.beats.run(beatsCtx)
	}()
	defer close(r.stopped)

	fatal := r.poll(ctx)
	r.ackAlone(r.slots.pollerGone())
	r.shutdown()
	stopBeats()
	<-beatsDone
	return fatal
}

// shutdown waits up to the grace period for the held tasks, then hands back the
// ones still running and the prefetched ones not started, and waits (bounded) for
// every report to finish.
func (r *runner) shutdown() {
	defer r.stopBG()
	idle := make(chan struct{})
	go func() {
		r.held.Wait()
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
	for _, h := range r.slots.stop() { // prefetched tasks not started by now are handed back too
		j := h.job
		if !j.claim() {
			continue // its handler returned; its report is on the way
		}
		j.cancel(ErrWorkerStopping)
		if j.lost.Load() {
			r.slots.done(j)
			continue
		}
		go r.handBack(j, h.unstarted)
	}
	final := time.AfterFunc(finalReportTimeout, r.stopBG)
	defer final.Stop()
	<-idle
}

// event tells WorkerConfig.OnEvent of a step, when it is set.
func (r *runner) event(kind WorkerEventKind, taskID string, err error) {
	if r.cfg.OnEvent != nil {
		r.cfg.OnEvent(WorkerEvent{Kind: kind, TaskID: taskID, Err: err})
	}
}

// Clock is a Worker's time (WorkerConfig.Clock): the wall clock, or a test's.
type Clock interface {
	// Now is time.Now.
	Now() time.Time
	// After is time.After: it fires once d has passed.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
