package tally_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/tally"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newQueue(t *testing.T, s *storage.Store, name string, maxRetries int) {
	t.Helper()
	if _, err := s.CreateQueue(context.Background(), storage.Queue{Name: name, MaxRetries: maxRetries}); err != nil {
		t.Fatal(err)
	}
}

func enqueue(t *testing.T, s *storage.Store, queue string, n int) []uuid.UUID {
	t.Helper()
	tasks := make([]storage.NewTask, n)
	ids := make([]uuid.UUID, n)
	for i := range tasks {
		ids[i] = uuid.Must(uuid.NewV7())
		tasks[i] = storage.NewTask{ID: ids[i], Payload: json.RawMessage(`{}`), Priority: 5}
	}
	if _, err := s.Enqueue(context.Background(), queue, tasks, nil); err != nil {
		t.Fatal(err)
	}
	return ids
}

// claim dispatches and claims up to n tasks of queue for worker w.
func claim(t *testing.T, s *storage.Store, queue string, n int, lease time.Duration) []storage.Task {
	t.Helper()
	ctx := context.Background()
	due, err := s.DispatchDue(ctx, queue, n, 1e13)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, len(due))
	for i, d := range due {
		ids[i] = d.ID
	}
	claimed, err := testenv.Claim(ctx, s, ids, "w", lease)
	if err != nil {
		t.Fatal(err)
	}
	return claimed
}

// exact fails unless queue's kept counts equal count(*) and, when want is given,
// equal want (statuses absent from want must be zero).
func exact(t *testing.T, s *storage.Store, queue string, want map[string]int64) {
	t.Helper()
	ctx := context.Background()
	drift, err := s.TallyDrift(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	if len(drift) > 0 {
		t.Fatalf("kept counts of %s drift from count(*): %v", queue, drift)
	}
	if want == nil {
		return
	}
	st, err := s.Stats(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	for _, status := range storage.Statuses {
		if st.Depth[status] != want[status] {
			t.Fatalf("depth of %s: %v, want %v", queue, st.Depth, want)
		}
	}
	if st.DLQDepth != want[storage.StatusDead] {
		t.Fatalf("dlq depth %d, want %d", st.DLQDepth, want[storage.StatusDead])
	}
}

// TestCountsFollowEveryTransition walks tasks through every transition that changes
// a status, folding at different points, and checks after each step that the kept
// counts are what count(*) says and what the step should leave.
func TestCountsFollowEveryTransition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.NewStore(t)
	f := tally.New(s, tally.Config{BatchSize: 3}, quiet) // small batches: several per fold
	newQueue(t, s, "q", 0)
	newQueue(t, s, "other", 3)

	enqueue(t, s, "q", 10)
	enqueue(t, s, "other", 4)
	exact(t, s, "q", map[string]int64{"pending": 10})
	exact(t, s, "other", map[string]int64{"pending": 4})

	if _, err := s.DispatchDue(ctx, "q", 4, 1e13); err != nil {
		t.Fatal(err)
	}
	exact(t, s, "q", map[string]int64{"pending": 6, "claimed": 4})
	if n, err := f.FoldOnce(ctx); err != nil || n == 0 {
		t.Fatalf("fold: %d %v", n, err)
	}
	exact(t, s, "q", map[string]int64{"pending": 6, "claimed": 4})

	tasks := claim(t, s, "q", 6, time.Minute) // dispatches the other 6 and claims them
	if len(tasks) != 6 {
		t.Fatalf("claimed %d, want 6", len(tasks))
	}
	exact(t, s, "q", map[string]int64{"claimed": 4, "executing": 6})

	// A heartbeat changes no status and adds no delta.
	before := deltas(t, s)
	if _, err := s.Heartbeat(ctx, "w", tasks[0].ID, *tasks[0].LeaseToken, time.Minute); err != nil {
		t.Fatal(err)
	}
	if after := deltas(t, s); after != before {
		t.Fatalf("a heartbeat appended %d deltas", after-before)
	}

	if _, err := s.Ack(ctx, "w", tasks[0].ID, *tasks[0].LeaseToken, json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	// max_retries 0: a retryable nack dead-letters.
	if _, err := s.Nack(ctx, storage.Nack{TaskID: tasks[1].ID, LeaseToken: *tasks[1].LeaseToken, WorkerID: "w", Error: "x", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, storage.Release{TaskID: tasks[2].ID, LeaseToken: *tasks[2].LeaseToken, WorkerID: "w", Reason: "stop"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelTask(ctx, "q", tasks[3].ID); err != nil { // executing: cancel requested
		t.Fatal(err)
	}
	exact(t, s, "q", map[string]int64{"pending": 1, "claimed": 4, "executing": 3, "done": 1, "dead": 1})
	if _, err := s.CancelTask(ctx, "q", enqueue(t, s, "q", 1)[0]); err != nil { // pending: cancelled at once
		t.Fatal(err)
	}
	exact(t, s, "q", map[string]int64{"pending": 1, "claimed": 4, "executing": 3, "done": 1, "dead": 1, "cancelled": 1})

	// Replay makes a new pending task; discarding removes the dead one.
	if _, err := s.Replay(ctx, "q", []uuid.UUID{tasks[1].ID}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.DiscardDead(ctx, "q", tasks[1].ID); err != nil {
		t.Fatal(err)
	}
	exact(t, s, "q", map[string]int64{"pending": 2, "claimed": 4, "executing": 3, "done": 1, "cancelled": 1})

	// Lease expiry: tasks 3 (cancel requested) 4 and 5 reclaimed by the watchdog's statement.
	for _, tk := range tasks[3:] {
		if _, err := s.Pool().Exec(ctx, `UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, tk.ID); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := s.ReclaimExpired(ctx, 100); err != nil || len(r) != 3 {
		t.Fatalf("reclaim: %d %v", len(r), err)
	}
	exact(t, s, "q", map[string]int64{"pending": 2, "claimed": 4, "done": 1, "dead": 2, "cancelled": 2})
	if _, err := f.FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}

	// Retention deletes the done and cancelled tasks (a cutoff of zero: all of them;
	// dead ones are kept forever).
	zero := int64(0)
	// Finished tasks are in history (migration 0023): today's done and cancelled
	// days leave whole, as the janitor drops an expired day.
	if n, err := s.DeleteExpiredTasks(ctx, storage.Retention{DoneMs: &zero, CancelledMs: &zero}, 100, 5*time.Second); err != nil || n != 0 {
		t.Fatalf("retention deleted %d finished tasks from tasks (%v), want none there", n, err)
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	for _, status := range []string{"done", "cancelled"} {
		if got, err := s.DetachHistoryDay(ctx, storage.HistoryDay{Status: status, Day: today}, 5*time.Second); err != nil || got != storage.DayDetached {
			t.Fatalf("detach today's %s: %s %v", status, got, err)
		}
	}
	days, err := s.DropDetachedHistory(ctx, 5*time.Second)
	var dropped int64
	for _, d := range days {
		dropped += d.Rows
	}
	if err != nil || dropped != 3 {
		t.Fatalf("dropped %d finished tasks with their days (%v), want 3", dropped, err)
	}
	exact(t, s, "q", map[string]int64{"pending": 2, "claimed": 4, "dead": 2})
	exact(t, s, "other", map[string]int64{"pending": 4})

	// A transaction that rolls back leaves no figure behind.
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A failure below must not leave the connection held: the pool's close at the
	// test's end would wait for it forever.
	defer func() { _ = tx.Rollback(ctx) }()
	// (A finishing update sets finished_at: the task moves into history, 0023.)
	if _, err := tx.Exec(ctx, `UPDATE tasks SET status = 'cancelled', finished_at = now() WHERE queue = 'q' AND status = 'pending'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	exact(t, s, "q", map[string]int64{"pending": 2, "claimed": 4, "dead": 2})
}

// TestQueueDeletionForgetsItsCounts: a queue deleted with its finished tasks, then
// created again under the same name, starts from zero.
func TestQueueDeletionForgetsItsCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.NewStore(t)
	f := tally.New(s, tally.Config{}, quiet)
	newQueue(t, s, "q", 3)
	for _, id := range enqueue(t, s, "q", 5) {
		if _, err := s.CancelTask(ctx, "q", id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue(t, s, "q", 2)
	if err := s.DeleteQueue(ctx, "q"); err == nil {
		t.Fatal("a queue with pending tasks was deleted")
	}
	all, err := s.AllStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := all["q"].Depth; got["pending"] != 2 || got["cancelled"] != 5 {
		t.Fatalf("AllStats depth %v, want 2 pending and 5 cancelled", got)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE tasks SET status = 'cancelled', finished_at = now() WHERE queue = 'q'`); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := s.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM queue_tally WHERE queue = 'q') + (SELECT count(*) FROM queue_tally_delta WHERE queue = 'q')`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("%d tally rows left for a deleted queue", rows)
	}
	newQueue(t, s, "q", 3)
	exact(t, s, "q", map[string]int64{})
	all, err = s.AllStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := all["q"]; !ok || len(all) != 1 {
		t.Fatalf("AllStats: %v", slicesOf(all))
	}
}

func slicesOf(m map[string]storage.Stats) []string {
	var out []string
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

// TestConcurrentTransitionsAndFoldersStayExact runs enqueues, claims, acks and
// cancels from several goroutines while three folders fold, then checks the counts.
func TestConcurrentTransitionsAndFoldersStayExact(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := testenv.NewStore(t)
	newQueue(t, s, "q", 3)
	var folders sync.WaitGroup
	for range 3 {
		f := tally.New(s, tally.Config{Interval: time.Millisecond, BatchSize: 7}, quiet)
		folders.Add(1)
		go func() { defer folders.Done(); _ = f.Run(ctx) }()
	}
	var work sync.WaitGroup
	for range 4 {
		work.Add(1)
		go func() {
			defer work.Done()
			for range 15 {
				ids := enqueue(t, s, "q", 10)
				// Another goroutine may have claimed and acked ids[0] already: then
				// there is nothing to cancel, and the counts must still add up.
				if _, err := s.CancelTask(ctx, "q", ids[0]); err != nil && !errors.Is(err, storage.ErrTaskNotCancellable) {
					t.Error(err)
					return
				}
				for _, tk := range claim(t, s, "q", 5, time.Minute) {
					if _, err := s.Ack(ctx, "w", tk.ID, *tk.LeaseToken, nil); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	work.Wait()
	cancel()
	folders.Wait()
	exact(t, s, "q", nil)
	st, err := s.Stats(context.Background(), "q")
	if err != nil {
		t.Fatal(err)
	}
	if total := st.Depth["pending"] + st.Depth["claimed"] + st.Depth["done"] + st.Depth["cancelled"]; total != 600 {
		t.Fatalf("depth %v adds up to %d, want 600", st.Depth, total)
	}
	if st.Depth["done"] == 0 || st.ThroughputPerSec <= 0 {
		t.Fatalf("no throughput: %+v", st)
	}
}

// TestThroughputAndErrorRateCountAttempts: succeeded and failed attempts in the
// window, cancelled and released ones left out of the error rate.
func TestThroughputAndErrorRateCountAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.NewStore(t)
	newQueue(t, s, "q", 5)
	enqueue(t, s, "q", 8)
	tasks := claim(t, s, "q", 8, time.Minute)
	for _, tk := range tasks[:3] {
		if _, err := s.Ack(ctx, "w", tk.ID, *tk.LeaseToken, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, tk := range tasks[3:4] {
		if _, err := s.Nack(ctx, storage.Nack{TaskID: tk.ID, LeaseToken: *tk.LeaseToken, WorkerID: "w", Error: "x", Retryable: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tk := range tasks[4:8] {
		if _, err := s.Release(ctx, storage.Release{TaskID: tk.ID, LeaseToken: *tk.LeaseToken, WorkerID: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.ErrorRate != 0.25 {
		t.Fatalf("error rate %v, want 1 failed of 4 finished = 0.25", st.ErrorRate)
	}
	// 3 successes over a window of 50 to 60 s.
	if st.ThroughputPerSec < 3.0/60 || st.ThroughputPerSec > 3.0/50 {
		t.Fatalf("throughput %v, want 3 per 50-60 s", st.ThroughputPerSec)
	}
}

func deltas(t *testing.T, s *storage.Store) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM queue_tally_delta`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
