package watchdog_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/watchdog"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// lifecycleOf returns the transitions over s and a buffer of the test's own on the
// shared Redis, with no dispatcher to wake.
func lifecycleOf(t *testing.T, s *storage.Store) *lifecycle.Lifecycle {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	return lifecycle.New(s, buffer.New(rdb, testenv.RedisPrefix(t)), nil, lifecycle.Config{}, quiet)
}

// observed is a Reclaimer that hands every batch its Reclaimer ended to seen, after
// the batch's follow-ups (tests wait on it instead of sleeping).
type observed struct {
	watchdog.Reclaimer
	seen func([]storage.Reclaimed)
}

func (o observed) Reclaim(ctx context.Context, limit int) ([]storage.Reclaimed, error) {
	rs, err := o.Reclaimer.Reclaim(ctx, limit)
	if err == nil && len(rs) > 0 {
		o.seen(rs)
	}
	return rs, err
}

// executing returns a store holding n tasks executing under leases of the given length.
func executing(t *testing.T, n, maxRetries int, lease time.Duration) *storage.Store {
	t.Helper()
	ctx := context.Background()
	s := testenv.NewStore(t)
	if _, err := s.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: maxRetries, BackoffBaseMs: 0, BackoffMaxMs: 0}); err != nil {
		t.Fatal(err)
	}
	tasks := make([]storage.NewTask, n)
	for i := range tasks {
		tasks[i] = storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`1`), Priority: 5}
	}
	if _, err := s.Enqueue(ctx, "q", tasks, nil); err != nil {
		t.Fatal(err)
	}
	due, err := s.DispatchDue(ctx, "q", n, 1e13)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, len(due))
	for i, d := range due {
		ids[i] = d.ID
	}
	if claimed, err := testenv.Claim(ctx, s, ids, "crashed", lease); err != nil || len(claimed) != n {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	return s
}

func TestConcurrentWatchdogsReclaimEachAttemptOnce(t *testing.T) {
	t.Parallel()
	s := executing(t, 600, 3, time.Millisecond)
	// The watchdogs look a second ahead of the database clock, past the 1 ms leases.
	var clock testenv.Clock
	clock.SetAhead(t, s, time.Second)
	s = testenv.Clocked(s, &clock)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[uuid.UUID]int{}
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := watchdog.New(s, observed{lifecycleOf(t, s), func(rs []storage.Reclaimed) {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range rs {
					seen[r.TaskID]++
					if r.Outcome != storage.AttemptAbandoned || r.Status != storage.StatusRetry || r.WorkerID != "crashed" {
						t.Errorf("reclaimed %+v", r)
					}
				}
			}}, watchdog.Config{BatchSize: 50}, quiet)
			for {
				n, err := w.ReclaimOnce(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != 600 {
		t.Fatalf("reclaimed %d distinct tasks, want 600", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("task %s reclaimed %d times", id, n)
		}
	}
}

func TestWatchdogLeavesValidLeasesAlone(t *testing.T) {
	t.Parallel()
	s := executing(t, 10, 3, time.Minute)
	w := watchdog.New(s, lifecycleOf(t, s), watchdog.Config{}, quiet)
	if n, err := w.ReclaimOnce(context.Background()); err != nil || n != 0 {
		t.Fatalf("reclaimed %d valid leases (%v)", n, err)
	}
	wait, ok, err := s.NextLeaseExpiry(context.Background())
	if err != nil || !ok || wait < 50*time.Second || wait > time.Minute {
		t.Fatalf("next expiry in %s (%v, %v), want about a minute", wait, ok, err)
	}
}

func TestRunReclaimsSoonAfterExpiryAndStops(t *testing.T) {
	t.Parallel()
	s := executing(t, 5, 0, 300*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	reclaimed := make(chan []storage.Reclaimed, 10)
	// A long interval: only sleeping until the earliest expiry can reclaim in time.
	w := watchdog.New(s, observed{lifecycleOf(t, s), func(rs []storage.Reclaimed) { reclaimed <- rs }},
		watchdog.Config{Interval: time.Hour}, quiet)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case rs := <-reclaimed:
		for _, r := range rs {
			if r.Status != storage.StatusDead { // max_retries 0: the first failure is final
				t.Fatalf("reclaimed %+v", r)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("expired leases were not reclaimed")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
