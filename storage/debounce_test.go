package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// debounced is a task to enqueue with debounce key key.
func debounced(key, payload string, priority int, ms int64, maxMs *int64) storage.NewTask {
	return storage.NewTask{ID: uuid.New(), Payload: json.RawMessage(payload), Priority: priority,
		DebounceKey: &key, DebounceMs: ms, DebounceMaxMs: maxMs}
}

func enqueueOne(t *testing.T, s *storage.Store, queue string, nt storage.NewTask) storage.Enqueued {
	t.Helper()
	out, err := s.Enqueue(context.Background(), queue, []storage.NewTask{nt}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// TestDebounceReplacesMovesAndCaps: a second enqueue with the key replaces the
// waiting task (same id, new payload and priority, due debounce_ms after it,
// debounced 1), up to the cap of debounce_max_ms from the first enqueue; once the
// task is due, or dispatched, the next enqueue creates a new task and the old one
// keeps its place.
func TestDebounceReplacesMovesAndCaps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := testenv.NewStore(t)
	clock := &testenv.Clock{}
	t0 := clock.SetAhead(t, base, 0).Truncate(time.Millisecond)
	clock.Set(t0)
	s := testenv.Clocked(base, clock)
	if _, err := s.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 2}); err != nil {
		t.Fatal(err)
	}
	maxMs := int64(1800)

	first := enqueueOne(t, s, "q", debounced("doc-1", `{"v":1}`, 5, 1000, &maxMs))
	if !first.Created || first.Replaced || first.Task.Status != storage.StatusPending ||
		!first.Task.ScheduledAt.Equal(t0.Add(time.Second)) || first.Task.Debounced != 0 ||
		first.Task.DebounceKey == nil || *first.Task.DebounceKey != "doc-1" || first.Task.MaxRetries != 2 {
		t.Fatalf("first enqueue: %+v", first)
	}

	clock.Set(t0.Add(500 * time.Millisecond))
	second := enqueueOne(t, s, "q", debounced("doc-1", `{"v":2}`, 2, 1000, &maxMs))
	if second.Created || !second.Replaced || second.Task.ID != first.Task.ID || string(second.Task.Payload) != `{"v": 2}` ||
		second.Task.Priority != 2 || !second.Task.ScheduledAt.Equal(t0.Add(1500*time.Millisecond)) || second.Task.Debounced != 1 {
		t.Fatalf("second enqueue: %+v (payload %s)", second, second.Task.Payload)
	}

	clock.Set(t0.Add(900 * time.Millisecond))
	third := enqueueOne(t, s, "q", debounced("doc-1", `{"v":3}`, 2, 1000, &maxMs))
	if !third.Replaced || third.Task.ID != first.Task.ID || !third.Task.ScheduledAt.Equal(t0.Add(1800*time.Millisecond)) ||
		third.Task.Debounced != 2 {
		t.Fatalf("third enqueue (capped at first + 1800 ms): %+v", third)
	}
	// Another key, or another queue, is another task.
	if other := enqueueOne(t, s, "q", debounced("doc-2", `{}`, 5, 1000, nil)); !other.Created {
		t.Fatalf("another key: %+v", other)
	}

	// Due: the holder is left as it is, and a new task waits.
	clock.Set(t0.Add(1900 * time.Millisecond))
	fourth := enqueueOne(t, s, "q", debounced("doc-1", `{"v":4}`, 5, 1000, &maxMs))
	if !fourth.Created || fourth.Task.ID == first.Task.ID || !fourth.Task.ScheduledAt.Equal(t0.Add(2900*time.Millisecond)) {
		t.Fatalf("enqueue after the holder was due: %+v", fourth)
	}
	old, _, err := s.GetTask(ctx, "q", first.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if old.Status != storage.StatusPending || string(old.Payload) != `{"v": 3}` || old.Debounced != 2 {
		t.Fatalf("the due holder changed: %+v", old)
	}

	// Dispatched (even before its due time): a new task.
	clock.Set(t0.Add(3000 * time.Millisecond))
	if _, err := s.DispatchDue(ctx, "q", 100, 0); err != nil {
		t.Fatal(err)
	}
	clock.Set(t0.Add(3100 * time.Millisecond))
	fifth := enqueueOne(t, s, "q", debounced("doc-1", `{"v":5}`, 5, 1000, nil))
	if !fifth.Created || fifth.Task.ID == fourth.Task.ID {
		t.Fatalf("enqueue after the holder was dispatched: %+v", fifth)
	}
	if drift, err := s.TallyDrift(ctx, "q"); err != nil || len(drift) != 0 {
		t.Fatalf("tally drift %v (%v)", drift, err)
	}
}

// TestDebounceRaceOnTwoStoresEndsWithOneTask: 50 enqueues of one key at once, from
// two stores with pools of their own (two replicas), leave one task that counts 49
// replacements.
func TestDebounceRaceOnTwoStoresEndsWithOneTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := testenv.NewStore(t)
	// b is a second replica: pools of its own on the same database.
	pool2, err := storage.Connect(ctx, a.Pool().Config().ConnString(), 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool2.Close)
	hot2, err := storage.Connect(ctx, a.Pool().Config().ConnString(), 8, storage.HotPathSettings())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hot2.Close)
	b := storage.New(pool2, storage.WithHotPool(hot2))
	if _, err := a.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 2}); err != nil {
		t.Fatal(err)
	}
	const n = 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	created := make(chan uuid.UUID, n)
	for i := range n {
		store := a
		if i%2 == 1 {
			store = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := store.Enqueue(ctx, "q", []storage.NewTask{debounced("burst", fmt.Sprintf(`{"i":%d}`, i), 5, 60_000, nil)}, nil)
			if err != nil {
				errs <- err
				return
			}
			if out[0].Created {
				created <- out[0].Task.ID
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	close(created)
	for err := range errs {
		t.Fatal(err)
	}
	if len(created) != 1 {
		t.Fatalf("%d enqueues created a task, want 1", len(created))
	}
	tasks, _, err := a.ListTasks(ctx, storage.TaskFilter{Queue: "q", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 || tasks[0].Debounced != n-1 || tasks[0].ID != <-created {
		t.Fatalf("tasks after the race: %d, debounced %d; want 1 task, debounced %d", len(tasks), tasks[0].Debounced, n-1)
	}
	if drift, err := a.TallyDrift(ctx, "q"); err != nil || len(drift) != 0 {
		t.Fatalf("tally drift %v (%v)", drift, err)
	}
}

// TestDebounceInABatch: a batch mixes plain and debounced tasks in one transaction;
// a later task with the key replaces an earlier one of the same batch, and both
// entries show the task as the batch left it; a missing queue fails the batch.
func TestDebounceInABatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.NewStore(t)
	if _, err := s.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 2}); err != nil {
		t.Fatal(err)
	}
	plain := storage.NewTask{ID: uuid.New(), Payload: json.RawMessage(`{}`), Priority: 5}
	out, err := s.Enqueue(ctx, "q", []storage.NewTask{
		debounced("k", `1`, 5, 60_000, nil), plain, debounced("k", `2`, 3, 60_000, nil),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !out[0].Created || !out[1].Created || !out[2].Replaced || out[0].Task.ID != out[2].Task.ID ||
		out[1].Task.ID != plain.ID || out[0].Task.Debounced != 1 || string(out[0].Task.Payload) != "2" {
		t.Fatalf("batch: %+v", out)
	}
	_, err = s.Enqueue(ctx, "nope", []storage.NewTask{debounced("k", `1`, 5, 60_000, nil)}, nil)
	if !errors.Is(err, storage.ErrQueueNotFound) {
		t.Fatalf("missing queue: %v", err)
	}
	_, err = s.Enqueue(ctx, "nope", []storage.NewTask{plain, debounced("k", `1`, 5, 60_000, nil)}, nil)
	if !errors.Is(err, storage.ErrQueueNotFound) {
		t.Fatalf("missing queue, batch: %v", err)
	}
}
