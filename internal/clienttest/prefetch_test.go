package clienttest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/server"
	"github.com/taskforge/taskforge/watchdog"
)

// gate is a handler for prefetch tests. A task whose payload is "quick" returns at
// once, "slow" after a little over client.DefaultPrefetchBelow of its worker's fake
// clock, and "hold" when the test releases it (or its context ends). It records the
// order in which handlers start, and hears its worker's steps beside its handlers'.
type gate struct {
	release chan struct{}
	steps   *steps     // the worker's steps and every handler's start
	clock   *fakeClock // the worker's, if fake: "slow" moves it
	mu      sync.Mutex
	started []string // task ids
}

func (g *gate) handle(ctx context.Context, job *client.Job) error {
	var kind string
	if err := job.Decode(&kind); err != nil {
		return err
	}
	g.mu.Lock()
	g.started = append(g.started, job.ID)
	g.mu.Unlock()
	g.steps.Signal("handler started " + job.ID)
	switch kind {
	case "slow":
		// The handler's duration is the point: the worker times it on its clock,
		// which is the test's, to decide whether to prefetch.
		if g.clock == nil {
			return errors.New("a slow task needs a worker on a fake clock")
		}
		g.clock.Advance(client.DefaultPrefetchBelow + 50*time.Millisecond)
	case "hold":
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// startGated starts a worker configured by cfg with a new gate as the handler of
// queue q and returns the gate. The gate hears the worker's steps (cfg.OnEvent).
func startGated(t *testing.T, c *client.Client, cfg client.WorkerConfig) (*gate, *running) {
	t.Helper()
	g := &gate{release: make(chan struct{}), steps: newSteps()}
	g.clock, _ = cfg.Clock.(*fakeClock)
	cfg.OnEvent = onStep(g.steps)
	w := client.NewWorker(c, cfg)
	w.Handle("q", g.handle)
	return g, start(t, w)
}

func (g *gate) hasStarted(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Contains(g.started, id)
}

func (g *gate) order() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.started)
}

// enqueueKinds enqueues one task per kind, in order, and returns their ids.
func enqueueKinds(t *testing.T, c *client.Client, kinds ...string) []string {
	t.Helper()
	ids := make([]string, len(kinds))
	for i, k := range kinds {
		ids[i] = must[*client.Task](t)(c.Enqueue(context.Background(), "q", client.NewTask{Payload: k})).ID
	}
	return ids
}

// warmUp runs tasks of kind through the worker so that it knows how long its
// handlers take.
func warmUp(t *testing.T, c *client.Client, kind string, n int) {
	t.Helper()
	for _, id := range enqueueKinds(t, c, slices.Repeat([]string{kind}, n)...) {
		waitTask(t, c, "q", id, 10*time.Second, "warm-up task done", status(client.StatusDone))
	}
}

// currentTasks is what the server says workerID holds.
func currentTasks(t *testing.T, c *client.Client, workerID string) []string {
	t.Helper()
	for _, w := range must[[]client.WorkerInfo](t)(c.ListWorkers(context.Background())) {
		if w.ID == workerID {
			return w.CurrentTasks
		}
	}
	return nil
}

// TestWorkerPrefetchesWhileHandlersRunShort: a worker with one slot whose handlers
// run short claims one task ahead while its handler runs, keeps that task's lease
// alive while it waits, starts it the moment the slot frees up, and never runs two
// handlers at once or claims a third task.
func TestWorkerPrefetchesWhileHandlersRunShort(t *testing.T) {
	t.Parallel()
	const lease = shortLease
	clock := &testenv.Clock{} // the database's clock until set
	srv, c := setup(t, func(cfg *server.Config) {
		shortLeases(cfg)
		cfg.Clock, cfg.WatchdogInterval = clock.Now, 50*time.Millisecond
	})
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	g, _ := startGated(t, c, workerConfig("w-prefetch", 1))
	warmUp(t, c, "quick", 3)

	ids := enqueueKinds(t, c, "hold", "quick", "quick")
	held, next, third := ids[0], ids[1], ids[2]
	g.steps.WaitUntil(t, "the held task running and the next one prefetched", func() bool {
		return g.hasStarted(held) && len(currentTasks(t, c, "w-prefetch")) == 2
	})
	if got := currentTasks(t, c, "w-prefetch"); !slices.Contains(got, next) {
		t.Fatalf("the worker holds %v, want the held task and the next one %s", got, next)
	}
	// The prefetched task waits past two lease lengths of the server's clock, which
	// the test moves half a lease at a time: after each move the worker's
	// heartbeats (every quarter lease of its own, real, clock) must extend both
	// leases before the watchdog sweeps, and no sweep may reclaim anything.
	checkSweep := func(sw watchdog.Sweep) {
		t.Helper()
		if sw.Reclaimed != 0 || sw.Err != nil {
			t.Fatalf("a watchdog sweep reclaimed %d leases (%v) while heartbeats kept them", sw.Reclaimed, sw.Err)
		}
	}
	clock.Set(time.Now())
	isBeat := func(step string) bool { return strings.HasPrefix(step, client.EventHeartbeat.String()) }
	for range 4 {
		clock.Advance(lease / 2)
		g.steps.Drain()
		for range 2 { // the second surely began after the move
			g.steps.WaitFor(t, "a heartbeat round after the server's clock moved", isBeat)
		}
		for sweeps := srv.Signals.WatchdogSweep.C(); len(sweeps) > 0; { // those since the last check
			checkSweep(<-sweeps)
		}
		for range 2 { // the second surely began after the heartbeat
			checkSweep(srv.Signals.WatchdogSweep.WaitOrTimeout(t, "a watchdog sweep"))
		}
	}
	if g.hasStarted(next) {
		t.Fatal("the prefetched task started while the only slot was taken")
	}
	if third := must[*client.Task](t)(c.GetTask(ctx, "q", third)); third.Status == client.StatusExecuting {
		t.Fatal("the worker claimed a second task ahead, beyond Prefetch 1")
	}
	close(g.release)

	heldTask := waitTask(t, c, "q", held, 10*time.Second, "held task done", status(client.StatusDone))
	for _, id := range []string{next, third} {
		got := waitTask(t, c, "q", id, 10*time.Second, "task done", status(client.StatusDone))
		if h := got.AttemptHistory; len(h) != 1 || h[0].Status != client.AttemptSucceeded {
			t.Fatalf("task %s attempts %+v, want one that succeeded (the lease was kept while it waited)", id, h)
		}
		if id == next && !got.AttemptHistory[0].StartedAt.Before(*heldTask.AttemptHistory[0].FinishedAt) {
			t.Fatalf("the next task was claimed at %s, not before the held one finished at %s",
				got.AttemptHistory[0].StartedAt, *heldTask.AttemptHistory[0].FinishedAt)
		}
	}
	if order := g.order(); !slices.Equal(order[len(order)-3:], ids) {
		t.Fatalf("handlers started in the order %v, want the claim order %v", order[len(order)-3:], ids)
	}
}

// TestPrefetchThresholdIsASetting: with PrefetchBelow raised above its handlers'
// time, a worker whose handlers run longer than the default threshold prefetches.
func TestPrefetchThresholdIsASetting(t *testing.T) {
	t.Parallel()
	_, c := setup(t, longLease)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	g, _ := startGated(t, c, client.WorkerConfig{ID: "w-patient", Concurrency: 1, PrefetchBelow: 5 * time.Second,
		PollWait: 2 * time.Second, ShutdownGrace: 2 * time.Second, Logger: logger(), Clock: newFakeClock()})
	warmUp(t, c, "slow", 2) // over the default threshold
	ids := enqueueKinds(t, c, "hold", "quick")
	g.steps.WaitUntil(t, "the next task prefetched", func() bool {
		return g.hasStarted(ids[0]) && len(currentTasks(t, c, "w-patient")) == 2
	})
	close(g.release)
	waitTask(t, c, "q", ids[1], 10*time.Second, "prefetched task done", status(client.StatusDone))
}

// TestWorkerDoesNotPrefetch: a worker whose handlers run long, or with prefetching
// turned off, or serving a queue with a concurrency cap (where a waiting task would
// hold a slot of the cap), claims nothing while its only slot is taken; an idle
// witness worker gets the next task instead.
func TestWorkerDoesNotPrefetch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		prefetch int
		warmUp   string
		cap      int // the queue's max_concurrency; 0 for none
	}{
		{"handlers run long", 1, "slow", 0},
		{"prefetch off", -1, "quick", 0},
		{"capped queue", 1, "quick", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, c := setup(t, longLease)
			ctx := context.Background()
			settings := client.QueueSettings{}
			if tc.cap > 0 {
				settings.MaxConcurrency = client.Set(tc.cap)
			}
			must[*client.Queue](t)(c.CreateQueue(ctx, "q", settings))
			g, _ := startGated(t, c, client.WorkerConfig{ID: "w-main", Concurrency: 1, Prefetch: tc.prefetch,
				PollWait: 2 * time.Second, ShutdownGrace: 2 * time.Second, Logger: logger(), Clock: newFakeClock()})
			warmUp(t, c, tc.warmUp, 2)
			held := enqueueKinds(t, c, "hold")[0]
			g.steps.WaitUntil(t, "held task running", func() bool { return g.hasStarted(held) })

			next := enqueueKinds(t, c, "quick")[0]
			witness := worker(c, "w-witness", 1)
			witness.Handle("q", func(context.Context, *client.Job) error { return nil })
			start(t, witness)
			got := waitTask(t, c, "q", next, 10*time.Second, "next task done", status(client.StatusDone))
			if h := got.AttemptHistory; len(h) != 1 || h[0].WorkerID != "w-witness" {
				t.Fatalf("next task attempts %+v, want one by the idle witness", h)
			}
			close(g.release)
			waitTask(t, c, "q", held, 10*time.Second, "held task done", status(client.StatusDone))
		})
	}
}

// TestPrefetchedTaskCancelledWhileWaiting: a prefetched task cancelled before its
// turn comes is reported cancelled without its handler ever running.
func TestPrefetchedTaskCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	_, c := setup(t, func(cfg *server.Config) { cfg.HeartbeatInterval = 100 * time.Millisecond })
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	g, _ := startGated(t, c, workerConfig("w-cancel", 1))
	warmUp(t, c, "quick", 2)
	ids := enqueueKinds(t, c, "hold", "quick")
	held, next := ids[0], ids[1]
	g.steps.WaitUntil(t, "the next task prefetched", func() bool {
		return g.hasStarted(held) && len(currentTasks(t, c, "w-cancel")) == 2
	})
	cancelled := must[*client.Task](t)(c.CancelTask(ctx, "q", next))
	// Heartbeats are sequential: once two have landed after the cancel, the worker
	// has read the answer of the first, which carried the cancel.
	var beats []time.Time
	waitTask(t, c, "q", next, 5*time.Second, "two heartbeats after the cancel", func(task *client.Task) bool {
		if hb := task.HeartbeatAt; hb != nil && hb.After(cancelled.UpdatedAt) && !slices.Contains(beats, *hb) {
			beats = append(beats, *hb)
		}
		return len(beats) >= 2
	})
	close(g.release)

	got := waitTask(t, c, "q", next, 10*time.Second, "prefetched task cancelled", status(client.StatusCancelled))
	if h := got.AttemptHistory; len(h) != 1 || h[0].Status != client.AttemptCancelled {
		t.Fatalf("attempts %+v", h)
	}
	waitTask(t, c, "q", held, 10*time.Second, "held task done", status(client.StatusDone))
	if g.hasStarted(next) {
		t.Fatal("the handler of the cancelled prefetched task ran")
	}
}

// TestWorkerShutdownWithPrefetchedTask: a stopping worker still runs a prefetched
// task whose slot frees up within the grace period; one still waiting when the
// grace period ends is handed back unstarted, for another worker.
func TestWorkerShutdownWithPrefetchedTask(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		releaseEarly bool // the running handler returns within the grace period
	}{
		{"slot frees within the grace period", true},
		{"grace period ends first", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, c := setup(t, longLease)
			ctx := context.Background()
			must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
			// A grace period the slot surely frees within, on a loaded machine too;
			// the worker stops as soon as its tasks are done, not at its end.
			grace := 10 * time.Second
			if !tc.releaseEarly {
				grace = 500 * time.Millisecond
			}
			// The poller parks once its slot and its prefetch room are both taken:
			// the worker then holds the prefetched task itself. (The server's list
			// of its tasks shows the claim a moment earlier, while the poll's answer
			// may still be on its way, and a worker stopped then hangs up on it.)
			var armed atomic.Bool
			parked := make(chan struct{}, 1)
			g, ra := startGated(t, c, client.WorkerConfig{ID: "w-a", Concurrency: 1, PollWait: 2 * time.Second,
				ShutdownGrace: grace, Logger: logger(), OnPark: func() {
					if armed.Load() {
						select {
						case parked <- struct{}{}:
						default:
						}
					}
				}})
			warmUp(t, c, "quick", 2)
			armed.Store(true)
			ids := enqueueKinds(t, c, "hold", "quick")
			held, next := ids[0], ids[1]
			select {
			case <-parked:
			case <-time.After(10 * time.Second):
				t.Fatal("the worker never held the next task prefetched")
			}
			g.steps.WaitUntil(t, "the held task started", func() bool { return g.hasStarted(held) })
			ra.cancel()
			if tc.releaseEarly {
				close(g.release)
			}
			if _, err := ra.stop(t, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			if !tc.releaseEarly {
				if g.hasStarted(next) {
					t.Fatal("the prefetched task started after the grace period")
				}
				b := worker(c, "w-b", 1)
				b.Handle("q", func(context.Context, *client.Job) error { return nil })
				start(t, b)
			}
			got := waitTask(t, c, "q", next, 10*time.Second, "prefetched task done", status(client.StatusDone))
			h := got.AttemptHistory
			switch {
			case tc.releaseEarly && (len(h) != 1 || h[0].WorkerID != "w-a"):
				t.Fatalf("attempts %s, want one by the stopping worker", attemptsText(h))
			case !tc.releaseEarly && (len(h) != 2 || h[0].Status != client.AttemptReleased ||
				!strings.Contains(*h[0].Error, "before the prefetched task started") || h[1].WorkerID != "w-b"):
				t.Fatalf("attempts %s, want one handed back unstarted, then one by w-b", attemptsText(h))
			}
		})
	}
}

// longLease keeps the test server's 1 s heartbeats but gives leases two minutes,
// so a task a test holds stays leased on a loaded machine even when heartbeats
// lag: these tests are about what the worker does, not about expiry, and an
// expired lease would turn a hand-back into an abandoned attempt.
func longLease(cfg *server.Config) { cfg.LeaseTimeout = 2 * time.Minute }

// attemptsText shows an attempt history legibly: worker, status and error of each.
func attemptsText(h []client.Attempt) string {
	parts := make([]string, len(h))
	for i, a := range h {
		parts[i] = fmt.Sprintf("#%d %s %s", a.Attempt, a.WorkerID, a.Status)
		if a.Error != nil {
			parts[i] += fmt.Sprintf(" (%q)", *a.Error)
		}
	}
	return "[" + strings.Join(parts, "; ") + "]"
}
