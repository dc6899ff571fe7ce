package dispatcher_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/taskforge/taskforge/dispatcher"
	"github.com/taskforge/taskforge/storage"
)

// insertQuietly adds n due tasks to queue with plain SQL: no NOTIFY, so only a
// wake-up or a sweep can find them.
func insertQuietly(t *testing.T, s *storage.Store, queue string, n int, scheduledAgo time.Duration) {
	t.Helper()
	_, err := s.Pool().Exec(context.Background(), `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries)
		SELECT gen_random_uuid(), $1, '{}', 5, 'pending', now() - $3 * interval '1 millisecond', 3 FROM generate_series(1, $2)`,
		queue, n, scheduledAgo.Milliseconds())
	if err != nil {
		t.Fatal(err)
	}
}

func createQueues(t *testing.T, s *storage.Store, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := s.CreateQueue(context.Background(), storage.Queue{Name: n, MaxRetries: 3}); err != nil {
			t.Fatal(err)
		}
	}
}

// runDispatcher runs a dispatcher of b until the test ends and returns its passes,
// one by one.
func runDispatcher(t *testing.T, b bundle, cfg dispatcher.Config) (*dispatcher.Dispatcher, <-chan dispatcher.Pass) {
	t.Helper()
	cfg.NoListen = true // no LISTEN (re)connect and its sweep: the tests' wake-ups are their own
	return startDispatcher(t, cfg, func(cfg dispatcher.Config) *dispatcher.Dispatcher {
		return newDispatcher(b.store, b.buf, cfg, quiet)
	})
}

// startDispatcher runs the dispatcher that build makes of cfg (with OnPass set
// here) until the test ends, and returns it and its passes, one by one.
func startDispatcher(t *testing.T, cfg dispatcher.Config, build func(dispatcher.Config) *dispatcher.Dispatcher) (*dispatcher.Dispatcher, <-chan dispatcher.Pass) {
	t.Helper()
	passes := make(chan dispatcher.Pass, 100)
	cfg.OnPass = func(p dispatcher.Pass) { passes <- p }
	d := build(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return d, passes
}

// nextPass waits for the first pass that satisfies ok, failing after 10 s.
func nextPass(t *testing.T, passes <-chan dispatcher.Pass, what string, ok func(dispatcher.Pass) bool) dispatcher.Pass {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case p := <-passes:
			if p.Err != nil {
				t.Fatalf("pass failed: %v", p.Err)
			}
			if ok(p) {
				return p
			}
		case <-timeout:
			t.Fatalf("no pass %s within 10 s", what)
		}
	}
}

// TestAWakeUpDispatchesItsQueueAlone: of 200 queues holding due work, a wake-up for
// one dispatches that one, and neither the others nor a look at every queue.
func TestAWakeUpDispatchesItsQueueAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	names := make([]string, 200)
	for i := range names {
		names[i] = fmt.Sprintf("q%03d", i)
	}
	createQueues(t, b.store, names...)
	d, passes := runDispatcher(t, b, dispatcher.Config{Interval: time.Hour, SweepInterval: time.Hour, RepairInterval: time.Hour})
	nextPass(t, passes, "first (a sweep)", func(p dispatcher.Pass) bool { return p.Sweep })

	for _, n := range names {
		insertQuietly(t, b.store, n, 3, time.Minute)
	}
	d.Wake("q007")
	p := nextPass(t, passes, "for the wake-up", func(p dispatcher.Pass) bool { return len(p.Queues) > 0 })
	if p.Sweep || p.Timed || !slices.Equal(p.Queues, []string{"q007"}) || p.Moved["q007"] != 3 || len(p.Moved) != 1 {
		t.Fatalf("pass %+v, want q007 alone with 3 tasks moved", p)
	}
	if n := b.rdb.ZCard(context.Background(), b.buf.Key("q008")).Val(); n != 0 {
		t.Fatalf("q008 buffered %d tasks without a wake-up", n)
	}
}

// TestTheSweepFindsWorkNoWakeUpAnnounced: tasks inserted without NOTIFY and due before
// the last timed pass reach the buffer by the sweep.
func TestTheSweepFindsWorkNoWakeUpAnnounced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createQueues(t, b.store, "a", "b")
	_, passes := runDispatcher(t, b, dispatcher.Config{Interval: 20 * time.Millisecond, SweepInterval: 300 * time.Millisecond, RepairInterval: time.Hour})
	nextPass(t, passes, "first (a sweep)", func(p dispatcher.Pass) bool { return p.Sweep })
	insertQuietly(t, b.store, "b", 4, time.Hour) // due long before any timed pass looks
	p := nextPass(t, passes, "that moves b's tasks", func(p dispatcher.Pass) bool { return p.Moved["b"] > 0 })
	if !p.Sweep || p.Moved["b"] != 4 {
		t.Fatalf("pass %+v, want a sweep moving 4 of b", p)
	}
}

// TestATimedPassDispatchesOnlyTheQueuesWhoseTasksBecameDue: of 100 queues each holding
// a task scheduled an hour ahead, the one whose task comes due is the only one
// dispatched, without a sweep, and on time.
func TestATimedPassDispatchesOnlyTheQueuesWhoseTasksBecameDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("q%03d", i)
	}
	createQueues(t, b.store, names...)
	for _, n := range names {
		insertQuietly(t, b.store, n, 1, -time.Hour)
	}
	d, passes := runDispatcher(t, b, dispatcher.Config{Interval: time.Hour, SweepInterval: time.Hour, RepairInterval: time.Hour})
	nextPass(t, passes, "first (a sweep)", func(p dispatcher.Pass) bool { return p.Sweep })
	at := time.Now().Add(300 * time.Millisecond)
	if _, err := b.store.Pool().Exec(ctx, `UPDATE tasks SET scheduled_at = $1 WHERE queue = 'q042'`, at); err != nil {
		t.Fatal(err)
	}
	// No NOTIFY came: the plain UPDATE is found by the timed pass planned after the
	// next wake-up, here one for an unrelated queue.
	d.Wake("q000")
	p := nextPass(t, passes, "that moves q042's task", func(p dispatcher.Pass) bool { return p.Moved["q042"] > 0 })
	if p.Sweep || !p.Timed || len(p.Moved) != 1 {
		t.Fatalf("pass %+v, want a timed pass moving q042 alone", p)
	}
	if late := time.Since(at); late > 2*time.Second {
		t.Fatalf("dispatched %s after it became due", late)
	}
}

// TestRepairPagesThroughEveryQueue: the repair step checks one bounded page of
// buffered tasks of all queues per call, resuming where it ended, and every page at
// once when Redis lost its data.
func TestRepairPagesThroughEveryQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	createQueues(t, b.store, "a", "c")
	insertQuietly(t, b.store, "a", 5, time.Minute)
	insertQuietly(t, b.store, "c", 5, time.Minute)
	d := newDispatcher(b.store, b.buf, dispatcher.Config{RepairAfter: time.Millisecond, RepairPage: 4}, quiet)
	if n, err := d.DispatchQueues(ctx, "a", "c"); err != nil || n != 10 {
		t.Fatalf("dispatch: %d %v", n, err)
	}
	if _, err := b.store.Pool().Exec(ctx, `UPDATE tasks SET dispatched_at = now() - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	// The first step finds no marker: Redis is new to it, so it checks everything.
	if n, err := d.RepairStep(ctx); err != nil || n != 0 {
		t.Fatalf("first step: %d %v", n, err)
	}
	b.rdb.Del(ctx, b.buf.Key("a"), b.buf.Key("c")) // entries lost, marker kept
	var got []int
	for range 4 {
		n, err := d.RepairStep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if !slices.Equal(got, []int{4, 4, 2, 0}) {
		t.Fatalf("re-added per step %v, want pages of 4: [4 4 2 0]", got)
	}
	// A FLUSHALL takes the marker too: one step re-adds all ten.
	b.rdb.Del(ctx, b.buf.Key("a"), b.buf.Key("c"), testPrefixKey(b, "epoch"))
	if n, err := d.RepairStep(ctx); err != nil || n != 10 {
		t.Fatalf("step after a loss: re-added %d (%v), want 10", n, err)
	}
}

// testPrefixKey names a key of the bundle's prefix outside any queue.
func testPrefixKey(b bundle, what string) string {
	k := b.buf.WakeChannel() // <prefix>:wake
	return k[:len(k)-len("wake")] + what
}
