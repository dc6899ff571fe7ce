package clienttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testsignal"
	"github.com/taskforge/taskforge/server"
)

func TestWorkerAcksWithResult(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	w := worker(c, "w-ack", 2)
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		var in struct{ N int }
		if err := job.Decode(&in); err != nil {
			return err
		}
		return job.SetResult(map[string]int{"double": in.N * 2})
	})
	start(t, w)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: map[string]int{"n": 21}}))
	got := waitTask(t, c, "q", task.ID, 10*time.Second, "task done", status(client.StatusDone))
	var res struct{ Double int }
	if err := json.Unmarshal(got.Result, &res); err != nil || res.Double != 42 {
		t.Fatalf("result %s (%v)", got.Result, err)
	}
	if len(got.AttemptHistory) != 1 || got.AttemptHistory[0].Status != client.AttemptSucceeded || got.AttemptHistory[0].WorkerID != "w-ack" {
		t.Fatalf("attempts %+v", got.AttemptHistory)
	}
	// A payload that does not decode is dead-lettered at once: Decode's error is permanent.
	bad := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: "not an object"}))
	got = waitTask(t, c, "q", bad.ID, 10*time.Second, "bad task dead", status(client.StatusDead))
	if got.Attempts != 1 || !strings.Contains(*got.LastError, "decode payload") {
		t.Fatalf("bad payload: %d attempts, error %v", got.Attempts, *got.LastError)
	}
}

func TestWorkerRetriesFailedHandler(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil) // queue backoff base 100ms
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{MaxRetries: client.Ptr(3)}))
	w := worker(c, "w-retry", 1)
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		if job.Attempt < 3 {
			return errors.New("smtp 451: try again")
		}
		return nil
	})
	start(t, w)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1}))
	got := waitTask(t, c, "q", task.ID, 15*time.Second, "task done", status(client.StatusDone))
	h := got.AttemptHistory
	if len(h) != 3 || h[0].Status != client.AttemptFailed || h[1].Status != client.AttemptFailed || h[2].Status != client.AttemptSucceeded {
		t.Fatalf("attempts %+v", h)
	}
	if *h[0].Error != "smtp 451: try again" {
		t.Fatalf("attempt 1 error %q", *h[0].Error)
	}
}

func TestWorkerRetryAfterOverridesBackoff(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	// With this backoff a plain failure would wait an hour.
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{BackoffBase: client.Ptr(time.Hour), BackoffMax: client.Ptr(2 * time.Hour)}))
	const after = 400 * time.Millisecond
	w := worker(c, "w-after", 1)
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		if job.Attempt == 1 {
			return client.RetryAfter(errors.New("rate limited upstream"), after)
		}
		return nil
	})
	start(t, w)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1}))
	got := waitTask(t, c, "q", task.ID, 10*time.Second, "task done", status(client.StatusDone))
	h := got.AttemptHistory
	if len(h) != 2 || *h[0].Error != "rate limited upstream" {
		t.Fatalf("attempts %+v", h)
	}
	gap := h[1].StartedAt.Sub(*h[0].FinishedAt)
	t.Logf("retry_after %s: second attempt started %s after the first failed", after, gap)
	if gap < after-20*time.Millisecond || gap > after+3*time.Second {
		t.Fatalf("second attempt %s after the first, want about %s", gap, after)
	}
}

func TestWorkerPermanentErrorDeadLetters(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{MaxRetries: client.Ptr(5)}))
	errBadAddress := errors.New("bad address")
	var calls atomic.Int32
	w := worker(c, "w-perm", 1)
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		calls.Add(1)
		return client.Permanent(errBadAddress)
	})
	start(t, w)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1}))
	got := waitTask(t, c, "q", task.ID, 10*time.Second, "task dead", status(client.StatusDead))
	if got.Attempts != 1 || calls.Load() != 1 || *got.LastError != "bad address" {
		t.Fatalf("dead after %d attempts (%d calls), error %q", got.Attempts, calls.Load(), *got.LastError)
	}
	dlq := must[*client.TaskPage](t)(c.ListDead(ctx, "q", 0, ""))
	if len(dlq.Tasks) != 1 || dlq.Tasks[0].ID != task.ID {
		t.Fatalf("dlq %+v", dlq.Tasks)
	}
	if perm := client.Permanent(errBadAddress); !errors.Is(perm, errBadAddress) || !client.IsPermanent(perm) || client.IsPermanent(errBadAddress) {
		t.Fatal("Permanent does not wrap its error")
	}
}

// panicky is a named function so that its name shows in the recorded stack.
func panicky(job *client.Job) error {
	if job.Attempt == 1 {
		var p *struct{ n int }
		p.n++ // nil pointer dereference
	}
	return nil
}

func TestWorkerRecoversPanic(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	w := worker(c, "w-panic", 1)
	w.Handle("q", func(ctx context.Context, job *client.Job) error { return panicky(job) })
	start(t, w)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1}))
	got := waitTask(t, c, "q", task.ID, 10*time.Second, "task done after a panic", status(client.StatusDone))
	h := got.AttemptHistory
	if len(h) != 2 || h[0].Status != client.AttemptFailed {
		t.Fatalf("attempts %+v", h)
	}
	msg := *h[0].Error
	for _, want := range []string{"panic: runtime error: invalid memory address or nil pointer dereference", "goroutine ", "clienttest_test.panicky(", "worker_test.go:"} {
		if !strings.Contains(msg, want) {
			t.Errorf("attempt error lacks %q:\n%s", want, msg)
		}
	}
}

func TestWorkerHeartbeatsKeepLease(t *testing.T) {
	t.Parallel()
	const lease = shortLease
	_, c := setup(t, shortLeases)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	var cause atomic.Value
	w := worker(c, "w-hb", 1)
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		// The work itself: a job that runs for over three lease lengths.
		select {
		case <-time.After(3*lease + 300*time.Millisecond):
			return nil
		case <-ctx.Done():
			cause.Store(context.Cause(ctx))
			return ctx.Err()
		}
	})
	start(t, w)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1}))
	got := waitTask(t, c, "q", task.ID, 10*time.Second, "task finished", func(t *client.Task) bool {
		return t.Status == client.StatusDone || t.Status == client.StatusDead || t.Attempts > 1
	})
	if got.Status != client.StatusDone || len(got.AttemptHistory) != 1 || cause.Load() != nil {
		t.Fatalf("status %s, attempts %+v, handler cancelled with %v", got.Status, got.AttemptHistory, cause.Load())
	}
	if d := got.AttemptHistory[0].FinishedAt.Sub(got.AttemptHistory[0].StartedAt); d < 3*lease {
		t.Fatalf("the attempt lasted %s, not over three leases", d)
	}
}

// blocker is a handler that reports when it starts and, when its context ends,
// when and why.
type blocker struct {
	started chan string               // task ids
	ends    testsignal.Signal[string] // every handler's end, with its task id
	mu      sync.Mutex
	ended   map[string]time.Time
	causes  map[string]error
}

func newBlocker() *blocker {
	b := &blocker{started: make(chan string, 100), ended: map[string]time.Time{}, causes: map[string]error{}}
	b.ends.Init()
	return b
}

func (b *blocker) handle(ctx context.Context, job *client.Job) error {
	b.started <- job.ID
	<-ctx.Done()
	b.mu.Lock()
	b.ended[job.ID] = time.Now()
	b.causes[job.ID] = context.Cause(ctx)
	b.mu.Unlock()
	b.ends.Signal(job.ID)
	return ctx.Err()
}

func (b *blocker) waitStart(t *testing.T) string {
	t.Helper()
	select {
	case id := <-b.started:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
		return ""
	}
}

// end waits for the handler of task id to end and returns when it did and its
// context's cause.
func (b *blocker) end(t *testing.T, id string) (time.Time, error) {
	t.Helper()
	var at time.Time
	var cause error
	b.ends.WaitUntil(t, "handler context cancelled", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		at, cause = b.ended[id], b.causes[id]
		return !at.IsZero()
	})
	return at, cause
}

// steps carries the steps of a test's workers (WorkerConfig.OnEvent, through
// onStep) and of its handlers, so that the test checks a condition after each
// step instead of on a timer: whatever a worker changes at the server, a step of
// it follows (a poll answered, a report or a heartbeat round done).
type steps = testsignal.Signal[string]

// newSteps returns an initialised steps.
func newSteps() *steps {
	s := &steps{}
	s.Init()
	return s
}

// onStep is a WorkerConfig.OnEvent that records each event on s.
func onStep(s *steps) func(client.WorkerEvent) {
	return func(ev client.WorkerEvent) { s.Signal(ev.Kind.String() + " " + ev.TaskID) }
}

// TestWorkerCancelStopsHandler: a cancel of an executing task reaches its handler's
// context with the worker's next heartbeat. The worker runs on a test clock, so
// "the next heartbeat" is one interval moved by hand, not a wait bounded in time.
func TestWorkerCancelStopsHandler(t *testing.T) {
	t.Parallel()
	const hb = 200 * time.Millisecond
	_, c := setup(t, func(cfg *server.Config) { cfg.HeartbeatInterval = hb })
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	b := newBlocker()
	clock := newFakeClock()
	w := client.NewWorker(c, client.WorkerConfig{ID: "w-cancel", Concurrency: 1, PollWait: time.Second,
		ShutdownGrace: -1, Logger: logger(), Clock: clock})
	w.Handle("q", b.handle)
	start(t, w)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1}))
	b.waitStart(t)

	req := must[*client.Task](t)(c.CancelTask(ctx, "q", task.ID))
	if !req.CancelRequested || req.Status != client.StatusExecuting {
		t.Fatalf("cancel of an executing task: %+v", req)
	}
	clock.waitWaiting(t, "the heartbeater waits")
	clock.Advance(hb)
	_, cause := b.end(t, task.ID)
	if !errors.Is(cause, client.ErrTaskCancelled) {
		t.Errorf("cause %v, want ErrTaskCancelled", cause)
	}
	got := waitTask(t, c, "q", task.ID, 5*time.Second, "task cancelled", status(client.StatusCancelled))
	if got.AttemptHistory[0].Status != client.AttemptCancelled {
		t.Fatalf("attempt %+v", got.AttemptHistory[0])
	}
}

func TestWorkerLeaseLostStopsHandler(t *testing.T) {
	t.Parallel()
	const hb = 200 * time.Millisecond
	s, c := setup(t, func(cfg *server.Config) {
		cfg.HeartbeatInterval = hb
		cfg.LeaseTimeout = time.Second
	})
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	b := newBlocker()
	w := worker(c, "w-lost", 1)
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		if job.Attempt > 1 {
			return nil
		}
		return b.handle(ctx, job)
	})
	start(t, w)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1}))
	b.waitStart(t)

	// Someone else now holds the lease (as after an expiry and a re-claim): the
	// worker's token is stale, so its next heartbeat gets 409 lease_lost.
	t0 := time.Now()
	if _, err := s.Server.Store.Pool().Exec(ctx, `UPDATE tasks SET lease_token = gen_random_uuid() WHERE id = $1`, task.ID); err != nil {
		t.Fatal(err)
	}
	at, cause := b.end(t, task.ID)
	t.Logf("handler context cancelled %s after the lease was lost (heartbeat interval %s)", at.Sub(t0), hb)
	if at.Sub(t0) > hb+250*time.Millisecond {
		t.Errorf("handler cancelled %s after the lease was lost, want within one heartbeat (%s)", at.Sub(t0), hb)
	}
	if !errors.Is(cause, client.ErrLeaseLost) {
		t.Errorf("cause %v, want ErrLeaseLost", cause)
	}
	// The worker reports nothing for a lost lease; the server reclaims it on
	// expiry and the task runs again.
	got := waitTask(t, c, "q", task.ID, 10*time.Second, "task done on a second attempt", status(client.StatusDone))
	if h := got.AttemptHistory; len(h) != 2 || h[0].Status != client.AttemptAbandoned {
		t.Fatalf("attempts %+v", h)
	}
}

func TestWorkerTimeoutEndsHandlerContext(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{MaxRetries: client.Ptr(0)}))
	b := newBlocker()
	w := worker(c, "w-timeout", 1)
	w.Handle("q", b.handle)
	start(t, w)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1, Timeout: time.Second}))
	b.waitStart(t)
	t0 := time.Now()
	at, cause := b.end(t, task.ID)
	if d := at.Sub(t0); d > 1200*time.Millisecond || !errors.Is(cause, context.DeadlineExceeded) {
		t.Fatalf("handler context ended after %s with %v, want about 1s with DeadlineExceeded", d, cause)
	}
	got := waitTask(t, c, "q", task.ID, 5*time.Second, "task dead", status(client.StatusDead))
	if s := got.AttemptHistory[0].Status; s != client.AttemptTimedOut && s != client.AttemptFailed {
		t.Fatalf("attempt %s", s)
	}
}

func TestWorkerFillsFreeSlots(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	const slots, tasks = 3, 8
	release := make(chan struct{})
	var now, peak atomic.Int32
	ev := newSteps()
	cfg := workerConfig("w-slots", slots)
	cfg.OnEvent = onStep(ev)
	w := client.NewWorker(c, cfg)
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		n := now.Add(1)
		defer now.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		ev.Signal("busy " + job.ID)
		<-release
		return nil
	})
	start(t, w)
	batch := make([]client.NewTask, tasks)
	for i := range batch {
		batch[i] = client.NewTask{Payload: i}
	}
	must[[]client.Task](t)(c.EnqueueBatch(ctx, "q", batch))
	ev.WaitUntil(t, "all slots busy", func() bool { return now.Load() == slots })

	// The worker asked for no more than its free slots: the rest is not leased.
	// (Waiting tasks are pending, or claimed: moved into the dispatch buffer.)
	executing := must[*client.TaskPage](t)(c.ListTasks(ctx, "q", client.TaskFilter{Status: client.StatusExecuting}))
	st := must[*client.Stats](t)(c.Stats(ctx, "q"))
	waiting := st.Depth[client.StatusPending] + st.Depth[client.StatusClaimed]
	if len(executing.Tasks) != slots || waiting != tasks-slots {
		t.Fatalf("%d executing and %d waiting, want %d and %d", len(executing.Tasks), waiting, slots, tasks-slots)
	}
	ws := must[[]client.WorkerInfo](t)(c.ListWorkers(ctx))
	if len(ws) != 1 || len(ws[0].CurrentTasks) != slots {
		t.Fatalf("workers %+v", ws)
	}
	close(release)
	ev.WaitUntil(t, "all tasks done", func() bool {
		st := must[*client.Stats](t)(c.Stats(ctx, "q"))
		return st.Depth[client.StatusDone] == tasks
	})
	if peak.Load() != slots {
		t.Fatalf("peak concurrency %d, want %d", peak.Load(), slots)
	}
}

func TestWorkerRunErrors(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	if err := worker(c, "w", 1).Run(ctx); err == nil || !strings.Contains(err.Error(), "no handlers") {
		t.Fatalf("Run without handlers: %v", err)
	}
	w := worker(c, "w", 1)
	w.Handle("not a valid name", func(context.Context, *client.Job) error { return nil })
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, client.ErrInvalidRequest) {
			t.Fatalf("Run polling an invalid queue name: %v, want ErrInvalidRequest", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run kept retrying a poll the server rejects as invalid")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a second handler for one queue did not panic")
		}
	}()
	w.Handle("not a valid name", func(context.Context, *client.Job) error { return nil })
}
