package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// newStore returns a Store on a fresh, migrated database. (The internal tests
// cannot use testserver: it imports server, which imports this package.)
func newStore(t *testing.T) *storage.Store { return testenv.NewStore(t) }

// seed creates queues with tasks in them and workers.
func seed(t *testing.T, store *storage.Store, queues, tasksPerQueue, workers int) {
	t.Helper()
	ctx := context.Background()
	for i := range queues {
		name := fmt.Sprintf("queue-%02d", i)
		if _, err := store.CreateQueue(ctx, storage.Queue{Name: name, MaxRetries: 3, BackoffBaseMs: 1000, BackoffMaxMs: 60000}); err != nil {
			t.Fatal(err)
		}
		tasks := make([]storage.NewTask, tasksPerQueue)
		for j := range tasks {
			tasks[j] = storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, j)), Priority: 1 + j%10}
		}
		if tasksPerQueue > 0 {
			if _, err := store.Enqueue(ctx, name, tasks, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range workers {
		if err := store.RecordWorker(ctx, fmt.Sprintf("worker-%02d", i), []string{"queue-00"}); err != nil {
			t.Fatal(err)
		}
	}
}

func testDashboard(t *testing.T, store *storage.Store, opts Options) *Dashboard {
	return &Dashboard{store: store, opts: opts.WithDefaults(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// However many browsers listen, each snapshot is computed once and the same
// bytes go to all of them.
func TestHubSharesEachSnapshot(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	seed(t, store, 3, 10, 2)
	d := testDashboard(t, store, Options{Interval: 100 * time.Millisecond})
	var computed atomic.Int64
	compute := func(ctx context.Context) (*Snapshot, error) {
		computed.Add(1)
		return d.snapshot(ctx)
	}
	h := newHub(compute, d.opts, d.log)
	defer h.stop()

	const subscribers = 8
	var mu sync.Mutex
	received := map[*byte]int{} // first byte of each message received → how many got it
	var wg sync.WaitGroup
	start := time.Now()
	for range subscribers {
		ch, initial, err := h.subscribe()
		if err != nil {
			t.Fatal(err)
		}
		if len(initial) < 2 || string(initial[1][:15]) != "event: history\n" {
			t.Fatalf("initial events: %q", initial)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer h.unsubscribe(ch)
			for n := 0; n < 8; n++ {
				msg := <-ch
				mu.Lock()
				received[&msg[0]]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	ticks := int64(elapsed/d.opts.Interval) + 2
	if n := computed.Load(); n > ticks {
		t.Errorf("%d computations in %s for %d subscribers; want at most %d (one per tick)", n, elapsed, subscribers, ticks)
	}
	shared := 0
	for _, n := range received {
		if n == subscribers {
			shared++
		}
	}
	if len(received) > int(computed.Load()) || shared < 5 {
		t.Errorf("%d distinct messages for %d computations, %d of them reached all %d subscribers",
			len(received), computed.Load(), shared, subscribers)
	}
}

// Stopping the hub ends every stream, refuses new ones and ends its goroutine.
func TestHubStops(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := testDashboard(t, store, Options{Interval: 50 * time.Millisecond})
	h := newHub(d.snapshot, d.opts, d.log)
	var chans []chan []byte
	for range 3 {
		ch, _, err := h.subscribe()
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	<-chans[0] // running
	h.mu.Lock()
	stopped := h.stopped
	h.mu.Unlock()
	h.stop() // returns once the goroutine has ended
	select {
	case <-stopped:
	default:
		t.Fatal("stop returned before the hub's goroutine ended")
	}
	for _, ch := range chans {
		for range ch { // drain what was queued; the channel must then be closed
		}
	}
	if _, _, err := h.subscribe(); err != errHubClosed {
		t.Fatalf("subscribe after stop: %v", err)
	}
}

// Without subscribers the hub stops computing after Linger, and starts again with
// the next one (with fresh history).
func TestHubIdlesWithoutSubscribers(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	d := testDashboard(t, store, Options{Interval: 50 * time.Millisecond, Linger: 200 * time.Millisecond})
	var computed atomic.Int64
	compute := func(ctx context.Context) (*Snapshot, error) {
		computed.Add(1)
		return d.snapshot(ctx)
	}
	h := newHub(compute, d.opts, d.log)
	defer h.stop()
	ch, _, err := h.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	<-ch
	h.mu.Lock()
	stopped := h.stopped
	h.mu.Unlock()
	h.unsubscribe(ch)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the hub kept computing without subscribers")
	}
	// Only the goroutine that stopped computes, and only a subscribe starts another:
	// with stopped closed and no new one in its place, nothing computes until then.
	idle := computed.Load()
	h.mu.Lock()
	restarted := h.stopped != stopped
	h.mu.Unlock()
	if restarted {
		t.Fatal("the hub started computing again without a subscriber")
	}
	ch, initial, err := h.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	if string(initial[1]) != "event: history\ndata: []\n\n" {
		t.Errorf("history after a restart: %q", initial[1])
	}
	<-ch
	if computed.Load() == idle {
		t.Fatal("the hub did not restart")
	}
	h.unsubscribe(ch)
}

// The chart's rates come from successive snapshots; shrinking depths (replays,
// discards) give zero, not negative rates.
func TestRaterPoints(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := func(dt time.Duration, done, dead, pending int64) *Snapshot {
		return &Snapshot{At: at.Add(dt), Queues: []QueueState{{Queue: storage.Queue{Name: "q"},
			Depth: map[string]int64{"done": done, "dead": dead, "pending": pending, "retry": 1}}}}
	}
	var r rater
	got := [][3]float64{
		r.point(snap(0, 10, 5, 3)).Queues["q"],
		r.point(snap(2*time.Second, 30, 6, 4)).Queues["q"],
		r.point(snap(3*time.Second, 30, 2, 0)).Queues["q"],
	}
	want := [][3]float64{{0, 0, 4}, {10, 0.5, 5}, {0, 0, 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("points %v, want %v", got, want)
	}
}

// What one snapshot costs with 20 queues, 2,000 tasks and 20 workers: logged as
// the figures the documentation quotes, and bounded loosely.
func TestSnapshotCost(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	seed(t, store, 20, 100, 20)
	d := testDashboard(t, store, Options{})
	var times []time.Duration
	var size int
	for range 15 {
		start := time.Now()
		snap, err := d.snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, time.Since(start))
		snap.Point = (&rater{}).point(snap)
		size = len(event("snapshot", snap))
	}
	slices.Sort(times)
	t.Logf("snapshot of 20 queues, 2000 tasks, 20 workers: median %s (min %s, max %s), %d bytes as an event",
		times[len(times)/2], times[0], times[len(times)-1], size)
	if median := times[len(times)/2]; median > time.Second {
		t.Errorf("a snapshot takes %s; the feed needs one per second", median)
	}
}
