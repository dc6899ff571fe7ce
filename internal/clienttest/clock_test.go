package clienttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testsignal"
	"github.com/taskforge/taskforge/server"
)

// fakeClock is a test's time: it moves only when Advance says so, and fires the
// waits (After) whose time has come.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	waits   testsignal.Signal[struct{}] // every After
}

// newFakeClock returns a clock set to now.
func newFakeClock() *fakeClock {
	c := &fakeClock{now: time.Now()}
	c.waits.Init()
	return c
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	c.waits.Signal(struct{}{})
	return ch
}

// Advance moves the clock by d and fires the waits that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// waitWaiting waits until a wait is pending, checking at every After: the worker's
// loop (what) has come round to wait on the clock.
func (c *fakeClock) waitWaiting(t *testing.T, what string) {
	t.Helper()
	c.waits.WaitUntil(t, what, func() bool { return c.Waiting() > 0 })
}

// Waiting is how many waits are pending.
// waitingFor counts the pending waits that fall due d after now.
func (c *fakeClock) waitingFor(d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.waiters {
		if w.at.Sub(c.now) == d {
			n++
		}
	}
	return n
}

func (c *fakeClock) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// TestLeaseEstimateWithInjectedClock: while heartbeats fail, the worker keeps a
// task's handler running until its own estimate of the lease (from the poll's
// answer, on the worker's clock) has surely run out, then cancels it with
// ErrLeaseLost. The clock is the test's, so no lease has to run out for real: the
// server's 30 s lease does not expire during the test.
func TestLeaseEstimateWithInjectedClock(t *testing.T) {
	t.Parallel()
	const lease, interval = 30 * time.Second, 10 * time.Second
	s, _ := setup(t, func(cfg *server.Config) { cfg.LeaseTimeout, cfg.HeartbeatInterval = lease, interval })
	target, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	// A proxy in front of the real server that fails heartbeats once cut is set.
	var cut atomic.Bool
	var failedBeats atomic.Int32
	var failed testsignal.Signal[int32]
	failed.Init()
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cut.Load() && strings.HasPrefix(r.URL.Path, "/workers/heartbeat") {
			failed.Signal(failedBeats.Add(1))
			http.Error(w, "heartbeats cut by the test", http.StatusBadGateway)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	c, err := client.New(front.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1}))

	clock := newFakeClock()
	w := client.NewWorker(c, client.WorkerConfig{ID: "w-clock", Concurrency: 1, PollWait: time.Second,
		ShutdownGrace: -1, Logger: logger(), Clock: clock})
	started := make(chan struct{})
	cause := make(chan error, 1)
	w.Handle("q", func(ctx context.Context, _ *client.Job) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	start(t, w)
	<-started
	cut.Store(true)

	// Each step: move the clock one heartbeat interval, and wait until the
	// heartbeater has handled the failed beat and waits again.
	step := func() {
		t.Helper()
		before := failedBeats.Load()
		clock.waitWaiting(t, "the heartbeater waits")
		clock.Advance(interval)
		failed.WaitUntil(t, "a failed heartbeat", func() bool { return failedBeats.Load() > before })
		clock.waitWaiting(t, "the heartbeater waits again")
	}
	// Within the lease, failures only retry. The estimate is the lease the poll's
	// answer gave (expiry minus its Date header, which is truncated to the second:
	// 30 to 31 s) from its arrival on the worker's clock, plus a margin; so at
	// +30 s the worker still counts on the lease, and at +40 s it surely has not.
	for i := 1; i <= 3; i++ {
		step()
		select {
		case err := <-cause:
			t.Fatalf("handler cancelled %s into a %s lease: %v", time.Duration(i)*interval, lease, err)
		default:
		}
	}
	step()
	select {
	case got := <-cause:
		if !errors.Is(got, client.ErrLeaseLost) {
			t.Fatalf("handler cancelled with %v, want ErrLeaseLost", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler not cancelled once the estimated lease ran out")
	}
	// The server still holds the task executing: the worker reported nothing.
	if got := must[*client.Task](t)(c.GetTask(ctx, "q", task.ID)); got.Status != "executing" {
		t.Fatalf("task is %s; a worker that lost its lease must not report it", got.Status)
	}
}

// TestWorkerConfigValidate: out-of-range settings are errors, from Validate and
// from Run, instead of being replaced silently; zero values take the defaults.
func TestWorkerConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (client.WorkerConfig{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	if err := (client.WorkerConfig{Prefetch: -1, ShutdownGrace: -1}).Validate(); err != nil {
		t.Fatalf("documented negative values: %v", err)
	}
	bad := map[string]client.WorkerConfig{
		"Concurrency":   {Concurrency: -1},
		"Prefetch":      {Prefetch: 101},
		"PrefetchBelow": {PrefetchBelow: -time.Second},
		"PollWait":      {PollWait: time.Minute},
		"RetryMin":      {RetryMin: -time.Second},
		"RetryMax":      {RetryMin: time.Second, RetryMax: time.Millisecond},
		"ID":            {ID: strings.Repeat("x", 201)},
	}
	c, err := client.New("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	for field, cfg := range bad {
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Validate = %v, want an error naming the field", field, err)
		}
		w := client.NewWorker(c, cfg)
		w.Handle("q", func(context.Context, *client.Job) error { return nil })
		if runErr := w.Run(context.Background()); runErr == nil || runErr.Error() != err.Error() {
			t.Errorf("%s: Run = %v, want %v", field, runErr, err)
		}
	}
}

// TestHeartbeatsAreOneRequestPerInterval: a worker holding five tasks extends all
// five leases with one request per heartbeat interval (a batch), not five.
func TestHeartbeatsAreOneRequestPerInterval(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	s, _ := setup(t, func(cfg *server.Config) { cfg.LeaseTimeout, cfg.HeartbeatInterval = 30*time.Second, interval })
	target, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var single int
	var batches []int // leases per batch request
	var batched testsignal.Signal[int]
	batched.Init()
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/workers/heartbeat":
			mu.Lock()
			single++
			mu.Unlock()
		case "/workers/heartbeat/batch":
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			var req struct {
				Leases []json.RawMessage `json:"leases"`
			}
			_ = json.Unmarshal(body, &req)
			mu.Lock()
			batches = append(batches, len(req.Leases))
			mu.Unlock()
			batched.Signal(len(req.Leases))
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	c, err := client.New(front.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	for i := 0; i < 5; i++ {
		must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: i}))
	}
	clock := newFakeClock()
	w := client.NewWorker(c, client.WorkerConfig{ID: "w-batch", Concurrency: 5, PollWait: time.Second,
		ShutdownGrace: -1, Logger: logger(), Clock: clock})
	var running atomic.Int32
	var started testsignal.Signal[int32]
	started.Init()
	release := make(chan struct{})
	w.Handle("q", func(ctx context.Context, _ *client.Job) error {
		started.Signal(running.Add(1))
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	start(t, w)
	t.Cleanup(func() { close(release) })
	started.WaitUntil(t, "five handlers running", func() bool { return running.Load() == 5 })

	for round := 1; round <= 2; round++ {
		clock.waitWaiting(t, "the heartbeater waits")
		clock.Advance(interval)
		batched.WaitUntil(t, "a heartbeat batch", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(batches) == round
		})
	}
	clock.waitWaiting(t, "the heartbeater waits again")
	mu.Lock()
	defer mu.Unlock()
	if single != 0 || len(batches) != 2 || batches[0] != 5 || batches[1] != 5 {
		t.Fatalf("two intervals with five tasks held sent %d single heartbeats and batches of %v; want no single and [5 5]", single, batches)
	}
}
