package clienttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/internal/testsignal"
	"github.com/taskforge/taskforge/server"
)

// TestWorkerShutdownHandsBackTasks: a worker told to stop lets a handler that
// finishes within the grace period ack, then releases the others, so that another
// worker runs them at once, long before their 30 s leases would have expired. The
// queue allows no retries: a hand-back that spent the budget would dead-letter them.
func TestWorkerShutdownHandsBackTasks(t *testing.T) {
	t.Parallel()
	_, c := setup(t, func(cfg *server.Config) { cfg.LeaseTimeout = 30 * time.Second })
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{MaxRetries: new(0)}))

	const grace = 500 * time.Millisecond
	stopping := make(chan struct{}) // closed when the test stops worker A
	never := make(chan struct{})    // a stubborn handler waits for this forever
	t.Cleanup(func() { close(never) })
	started := make(chan string, 3)
	var mu sync.Mutex
	causes := map[string]error{}
	a := client.NewWorker(c, client.WorkerConfig{ID: "worker-a", Concurrency: 3, ShutdownGrace: grace,
		PollWait: 2 * time.Second, Logger: logger()})
	a.Handle("q", func(ctx context.Context, job *client.Job) error {
		var kind string
		if err := job.Decode(&kind); err != nil {
			return err
		}
		started <- kind
		switch kind {
		case "quick": // finishes soon after the shutdown begins, within the grace period
			<-stopping
			return nil
		case "polite": // stops when its context ends
			<-ctx.Done()
			mu.Lock()
			causes[job.ID] = context.Cause(ctx)
			mu.Unlock()
			return ctx.Err()
		default: // stubborn: ignores its context
			<-never
			return nil
		}
	})
	ra := start(t, a)
	ids := map[string]string{}
	for _, kind := range []string{"quick", "polite", "stubborn"} {
		ids[kind] = must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: kind})).ID
	}
	for range 3 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("worker A did not start all three tasks")
		}
	}

	// Worker B waits for work; it gets only what A hands back.
	var mu2 sync.Mutex
	redelivered := map[string]time.Time{}
	// B's polls are answered every 100 ms while there is no work, so that the first
	// answer, a step of B, comes soon after the server saw B polling.
	stepsB := newSteps()
	b := client.NewWorker(c, client.WorkerConfig{ID: "worker-b", Concurrency: 3, PollWait: 100 * time.Millisecond, Logger: logger(),
		OnEvent: onStep(stepsB)})
	b.Handle("q", func(ctx context.Context, job *client.Job) error {
		mu2.Lock()
		redelivered[job.ID] = time.Now()
		mu2.Unlock()
		return nil
	})
	start(t, b)
	stepsB.WaitUntil(t, "worker B polling", func() bool {
		ws := must[[]client.WorkerInfo](t)(c.ListWorkers(ctx))
		return len(ws) == 2
	})

	t0 := time.Now()
	ra.cancel()
	close(stopping)
	took, err := ra.stop(t, 10*time.Second)
	t.Logf("worker A: Run returned %v after %s (grace %s)", err, took, grace)
	if err != nil || took < grace || took > grace+time.Second {
		t.Fatalf("Run returned %v after %s, want nil within the grace period %s (+1s)", err, took, grace)
	}

	quick := waitTask(t, c, "q", ids["quick"], 5*time.Second, "quick task done", status(client.StatusDone))
	if h := quick.AttemptHistory; len(h) != 1 || h[0].WorkerID != "worker-a" {
		t.Fatalf("quick task was not acked by A within the grace period: %+v", h)
	}
	for _, kind := range []string{"polite", "stubborn"} {
		got := waitTask(t, c, "q", ids[kind], 5*time.Second, kind+" task done by B", status(client.StatusDone))
		h := got.AttemptHistory
		if len(h) != 2 || h[0].WorkerID != "worker-a" || h[0].Status != client.AttemptReleased ||
			!strings.Contains(*h[0].Error, "shut down") || h[1].WorkerID != "worker-b" || got.Releases != 1 {
			t.Fatalf("%s task attempts %+v", kind, h)
		}
		mu2.Lock()
		at := redelivered[ids[kind]]
		mu2.Unlock()
		t.Logf("%s task re-delivered to worker B %s after SIGTERM-equivalent (%s after the grace period)", kind, at.Sub(t0), at.Sub(t0)-grace)
		if at.Sub(t0) > grace+2*time.Second {
			t.Errorf("%s task re-delivered %s after the shutdown began", kind, at.Sub(t0))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if cause := causes[ids["polite"]]; !errors.Is(cause, client.ErrWorkerStopping) {
		t.Errorf("polite handler's context cause %v, want ErrWorkerStopping", cause)
	}
}

// TestWorkerShutdownOnOlderServerNacks: against a server without
// /workers/release (404), a stopping worker hands its task back with a zero-delay
// nack, as workers did before the endpoint existed: the task retries at once.
func TestWorkerShutdownOnOlderServerNacks(t *testing.T) {
	t.Parallel()
	s, direct := setup(t, func(cfg *server.Config) { cfg.LeaseTimeout = 2 * time.Minute })
	ctx := context.Background()
	must[*client.Queue](t)(direct.CreateQueue(ctx, "q", client.QueueSettings{}))
	target, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	var refused atomic.Int64
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/workers/release" {
			refused.Add(1)
			http.NotFound(w, r)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(old.Close)
	c, err := client.New(old.URL)
	if err != nil {
		t.Fatal(err)
	}

	started := make(chan struct{}, 1)
	a := client.NewWorker(c, client.WorkerConfig{ID: "worker-a", Concurrency: 1, ShutdownGrace: 100 * time.Millisecond,
		PollWait: time.Second, Logger: logger()})
	a.Handle("q", func(ctx context.Context, _ *client.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	ra := start(t, a)
	id := must[*client.Task](t)(direct.Enqueue(ctx, "q", client.NewTask{Payload: "x"})).ID
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
	ra.cancel()
	if _, err := ra.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got := waitTask(t, direct, "q", id, 10*time.Second, "the task handed back", func(task *client.Task) bool {
		h := task.AttemptHistory
		return len(h) == 1 && h[0].Status != client.AttemptExecuting
	})
	if h := got.AttemptHistory; len(h) != 1 || h[0].Status != client.AttemptFailed ||
		!strings.Contains(*h[0].Error, "shut down") || got.Releases != 0 || refused.Load() != 1 {
		t.Fatalf("attempts %+v, releases %d, release calls refused %d: want one failed attempt by a nack after one refused release",
			h, got.Releases, refused.Load())
	}
}

// proxy forwards TCP connections to a real server. While down it accepts and
// closes every connection at once (counting them), like a server that went away.
type proxy struct {
	ln      net.Listener
	target  string
	down    atomic.Bool
	refused atomic.Int64
	refusal testsignal.Signal[int64] // every connection refused, with the count so far
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(target, "http://"), conns: map[net.Conn]struct{}{}}
	p.refusal.Init()
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.closeAll()
	})
	return p
}

func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			in.Close()
			p.refusal.Signal(p.refused.Add(1))
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}

func (p *proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// setDown takes the "server" away (cutting open connections) or brings it back.
func (p *proxy) setDown(down bool) {
	p.down.Store(down)
	if down {
		p.closeAll()
	}
}

// TestWorkerSurvivesServerOutage: while the server is unreachable the worker
// retries with growing, jittered delays (no hot loop), keeps the result of a task
// that finished meanwhile, and resumes polling and reporting once it is back.
func TestWorkerSurvivesServerOutage(t *testing.T) {
	t.Parallel()
	s, direct := setup(t, nil) // lease 5s, heartbeat 1s
	ctx := context.Background()
	must[*client.Queue](t)(direct.CreateQueue(ctx, "q", client.QueueSettings{}))
	p := startProxy(t, s.URL)
	c := must[*client.Client](t)(client.New(p.URL()))

	const retryMin, retryMax = 40 * time.Millisecond, 400 * time.Millisecond
	releaseA, releaseC := make(chan struct{}), make(chan struct{})
	started := make(chan string, 10)
	w := client.NewWorker(c, client.WorkerConfig{ID: "w-outage", Concurrency: 4, PollWait: 2 * time.Second,
		RetryMin: retryMin, RetryMax: retryMax, Logger: logger()})
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		var name string
		if err := job.Decode(&name); err != nil {
			return err
		}
		started <- name
		switch name {
		case "a": // finishes during the outage
			<-releaseA
		case "c": // runs across the whole outage
			<-releaseC
		}
		return job.SetResult(name)
	})
	start(t, w)
	a := must[*client.Task](t)(direct.Enqueue(ctx, "q", client.NewTask{Payload: "a"}))
	cTask := must[*client.Task](t)(direct.Enqueue(ctx, "q", client.NewTask{Payload: "c"}))
	for range 2 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("tasks a and c did not start")
		}
	}

	p.setDown(true)
	down := time.Now()
	close(releaseA) // its ack now fails and must be retried
	b := must[*client.Task](t)(direct.Enqueue(ctx, "q", client.NewTask{Payload: "b"}))
	const attempts = 10
	p.refusal.WaitUntil(t, "the worker to retry during the outage", func() bool { return p.refused.Load() >= attempts })
	elapsed := time.Since(down)
	t.Logf("outage: %d connection attempts in %s", p.refused.Load(), elapsed)
	// Two loops retry (poll and a's ack), each waiting at least retryMin/2, then
	// doubling: ten attempts cannot come within 4·retryMin. A hot loop would.
	if elapsed < 4*retryMin {
		t.Fatalf("%d attempts within %s: the worker does not back off", attempts, elapsed)
	}
	// Let the outage last past the longest backoff, then check the rate stayed low.
	testenv.Elapse(time.Until(down.Add(3 * retryMax))) // the outage's length is what is measured
	n, d := p.refused.Load(), time.Since(down)
	t.Logf("outage: %d connection attempts in %s", n, d)
	// Expected: about 7 per retry loop (two loops) plus a heartbeat; a hot loop
	// would make thousands.
	if n > 40 {
		t.Fatalf("%d connection attempts in %s: not backing off", n, d)
	}

	p.setDown(false)
	up := time.Now()
	gotA := waitTask(t, direct, "q", a.ID, 5*time.Second, "task a acked after the outage", status(client.StatusDone))
	gotB := waitTask(t, direct, "q", b.ID, 5*time.Second, "task b run after the outage", status(client.StatusDone))
	t.Logf("after the server came back: a acked and b done within %s", time.Since(up))
	if time.Since(up) > retryMax+2*time.Second {
		t.Errorf("resumed %s after the server came back", time.Since(up))
	}
	close(releaseC)
	gotC := waitTask(t, direct, "q", cTask.ID, 5*time.Second, "task c done", status(client.StatusDone))
	for _, got := range []*client.Task{gotA, gotB, gotC} {
		if len(got.AttemptHistory) != 1 || got.AttemptHistory[0].Status != client.AttemptSucceeded {
			t.Errorf("task %s: attempts %+v (want one, succeeded: the lease outlived the outage)", got.Payload, got.AttemptHistory)
		}
	}
}

// TestWorkerCutOffPastLeaseStopsHandler: when heartbeats cannot reach the server
// for longer than the lease, the server will give the task to someone else, so the
// worker cancels the handler (cause ErrLeaseLost) and reports nothing; the task
// runs again once the server is back.
func TestWorkerCutOffPastLeaseStopsHandler(t *testing.T) {
	t.Parallel()
	const lease, hb = time.Second, 250 * time.Millisecond
	s, direct := setup(t, func(cfg *server.Config) {
		cfg.LeaseTimeout = lease
		cfg.HeartbeatInterval = hb
	})
	ctx := context.Background()
	must[*client.Queue](t)(direct.CreateQueue(ctx, "q", client.QueueSettings{}))
	p := startProxy(t, s.URL)
	c := must[*client.Client](t)(client.New(p.URL()))
	b := newBlocker()
	beats := newSteps()
	w := client.NewWorker(c, client.WorkerConfig{ID: "w-cutoff", Concurrency: 1, PollWait: time.Second,
		RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, Logger: logger(), OnEvent: onStep(beats)})
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		if job.Attempt > 1 {
			return nil
		}
		return b.handle(ctx, job)
	})
	start(t, w)
	task := must[*client.Task](t)(direct.Enqueue(ctx, "q", client.NewTask{Payload: 1}))
	b.waitStart(t)
	beats.WaitUntil(t, "a heartbeat", func() bool {
		got := must[*client.Task](t)(direct.GetTask(ctx, "q", task.ID))
		return got.HeartbeatAt != nil
	})

	p.setDown(true)
	down := time.Now()
	at, cause := b.end(t, task.ID)
	t.Logf("cut off: handler cancelled %s after the last chance to heartbeat (lease %s)", at.Sub(down), lease)
	if !errors.Is(cause, client.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
	// The estimate errs late, never early: at least a lease after the last
	// heartbeat, at most a lease plus the Date header's second, the margin, a
	// heartbeat interval and some scheduling slack.
	if d, most := at.Sub(down), lease+time.Second+250*time.Millisecond+hb+500*time.Millisecond; d < lease-hb || d > most {
		t.Errorf("handler cancelled %s after the cut, want from %s to %s", d, lease-hb, most)
	}
	p.setDown(false)
	got := waitTask(t, direct, "q", task.ID, 10*time.Second, "task done on a second attempt", status(client.StatusDone))
	if h := got.AttemptHistory; len(h) != 2 || h[0].Status != client.AttemptAbandoned || h[1].WorkerID != "w-cutoff" {
		t.Fatalf("attempts %+v", h)
	}
}

// TestWorkerRunReturnsAfterHeldAcksCommit: Run returns only once every ack it
// held (for the next poll, or queued behind a batch in flight) is committed. The
// worker is stopped the moment its handlers have run every task, when the last
// acks are still held or on their way, and the queue is read once after Run
// returns: every task is done, with no waiting for it.
func TestWorkerRunReturnsAfterHeldAcksCommit(t *testing.T) {
	t.Parallel()
	const n = 2000
	c, _ := pollLogServer(t, false, client.QueueSettings{})
	for done := 0; done < n; done += 500 {
		enqueueTogether(t, c, slices.Repeat([]string{"quick"}, min(500, n-done))...)
	}
	var mu sync.Mutex
	ran := map[string]bool{}
	all := make(chan struct{}) // closed when the handlers have run every task
	w := client.NewWorker(c, workerConfig("w-flush", 16))
	w.Handle("q", func(_ context.Context, job *client.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if !ran[job.ID] {
			ran[job.ID] = true
			if len(ran) == n {
				close(all)
			}
		}
		return nil
	})
	r := start(t, w)
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the handlers ran %d of %d tasks within 60 s", len(ran), n)
	}
	if _, err := r.stop(t, 30*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := must[*client.Stats](t)(c.Stats(context.Background(), "q"))
	if got := st.Depth[client.StatusDone]; got != n {
		t.Fatalf("after Run returned, %d of %d tasks were done: Run returned before every ack was committed (depth %v)", got, n, st.Depth)
	}
}

// holdAckPoll hands the answer of the first poll carrying acks (answered by the
// server, its acks committed) to the worker only once released is closed, unless
// the poll's context ended first, as an aborted request would have.
type holdAckPoll struct {
	next     http.RoundTripper
	held     chan struct{} // closed when the first poll carrying acks was answered
	released chan struct{}
	once     sync.Once
	mu       sync.Mutex
	carried  []string
}

func (h *holdAckPoll) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.URL.Path == "/workers/poll" && r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := h.next.RoundTrip(r)
	if err != nil || body == nil {
		return resp, err
	}
	var req struct {
		Acks []struct {
			TaskID string `json:"task_id"`
		} `json:"acks"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Acks) == 0 {
		return resp, nil
	}
	first := false
	h.once.Do(func() {
		first = true
		h.mu.Lock()
		for _, a := range req.Acks {
			h.carried = append(h.carried, a.TaskID)
		}
		h.mu.Unlock()
		close(h.held)
	})
	if !first {
		return resp, nil
	}
	<-h.released
	if err := r.Context().Err(); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// lockedBuffer is a log sink for a worker's logger.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestWorkerStopWaitsForAPollCarryingAcks: a stop abandons a poll waiting for
// work, not one carrying acks, which the server answers at once. The first poll
// carrying acks is answered (its acks committed), and its answer is handed to the
// worker only after Run's context was cancelled: unless that cancelled it, the
// worker reads it. Had it been abandoned, the acks' fate unknown, the worker would
// send them again, and they would be refused: the leases are gone.
func TestWorkerStopWaitsForAPollCarryingAcks(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	h := &holdAckPoll{next: http.DefaultTransport, held: make(chan struct{}), released: make(chan struct{})}
	c, err := client.New(s.URL, client.WithHTTPClient(&http.Client{Transport: h}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	enqueueTogether(t, c, slices.Repeat([]string{"quick"}, 20)...)
	var logs lockedBuffer
	cfg := workerConfig("w-stop-acks", 2)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	w := client.NewWorker(c, cfg)
	w.Handle("q", func(context.Context, *client.Job) error { return nil })
	r := start(t, w)
	select {
	case <-h.held:
	case <-time.After(20 * time.Second):
		t.Fatal("no poll carried acks within 20 s")
	}
	r.cancel()
	close(h.released)
	if _, err := r.stop(t, 30*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	h.mu.Lock()
	carried := h.carried
	h.mu.Unlock()
	for _, id := range carried {
		if task := must[*client.Task](t)(c.GetTask(ctx, "q", id)); task.Status != client.StatusDone {
			t.Errorf("task %s whose ack the poll carried is %s", id, task.Status)
		}
	}
	if strings.Contains(logs.String(), "refused") {
		t.Fatalf("the acks of the poll out at the stop went again and were refused:\n%s", logs.String())
	}
}
