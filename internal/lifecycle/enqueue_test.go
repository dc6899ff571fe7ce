package lifecycle_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/dispatcher"
	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// direct is a lifecycle whose enqueues buffer due tasks themselves (BufferTarget),
// on a queue "d" without limits; no dispatcher runs.
type direct struct {
	lc    *lifecycle.Lifecycle
	store *storage.Store
	buf   *buffer.Buffer
	rdb   *redis.Client
}

func setupDirect(t *testing.T, target int) direct {
	t.Helper()
	store := testenv.NewStore(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	buf := buffer.New(rdb, testenv.RedisPrefix(t))
	if _, err := store.CreateQueue(context.Background(), storage.Queue{Name: "d", MaxRetries: 3}); err != nil {
		t.Fatal(err)
	}
	lc := lifecycle.New(store, buf, nil, lifecycle.Config{BufferTarget: target}, quiet)
	return direct{lc: lc, store: store, buf: buf, rdb: rdb}
}

func (d direct) enqueue(t *testing.T, n int, at *time.Time) []storage.Enqueued {
	t.Helper()
	tasks := make([]storage.NewTask, n)
	for i := range tasks {
		tasks[i] = storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{}`), Priority: 5, ScheduledAt: at}
	}
	out, err := d.lc.Enqueue(context.Background(), "d", tasks, true)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (d direct) claim(t *testing.T, want int) []storage.Task {
	t.Helper()
	ctx := context.Background()
	limits, ok, err := d.lc.Limits().Get(ctx, "d")
	if err != nil || !ok {
		t.Fatalf("settings of d: %v %v", ok, err)
	}
	tasks, _, err := d.lc.Claim(ctx, "w", "d", limits, want, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

func statuses(out []storage.Enqueued) map[string]int {
	m := map[string]int{}
	for _, e := range out {
		m[e.Task.Status]++
	}
	return m
}

// A task enqueued due now can be claimed at once, with no dispatcher running: the
// enqueue committed it dispatched and put it in the buffer itself.
func TestEnqueuedDueTaskIsClaimableWithoutDispatcher(t *testing.T) {
	d := setupDirect(t, 1000)
	out := d.enqueue(t, 3, nil)
	if s := statuses(out); s[storage.StatusBuffered] != 3 {
		t.Fatalf("statuses after enqueue: %v, want 3 claimed", s)
	}
	got := d.claim(t, 5)
	if len(got) != 3 {
		t.Fatalf("claimed %d of 3", len(got))
	}
}

// Tasks go to the dispatcher as before when they are scheduled, when the queue is
// paused, when it holds due work the dispatcher has yet to move (no task jumps
// ahead of older ones), and when the buffer has no room for them.
func TestEnqueueLeavesToDispatcher(t *testing.T) {
	ctx := context.Background()
	t.Run("scheduled", func(t *testing.T) {
		d := setupDirect(t, 1000)
		at := time.Now().Add(-time.Second) // due, but given a time: the dispatcher's
		if s := statuses(d.enqueue(t, 1, &at)); s[storage.StatusPending] != 1 {
			t.Fatalf("statuses: %v", s)
		}
	})
	t.Run("paused", func(t *testing.T) {
		d := setupDirect(t, 1000)
		// Paused in PostgreSQL behind the settings this replica read: the statement
		// has the last word.
		if _, ok, err := d.lc.Limits().Get(ctx, "d"); err != nil || !ok {
			t.Fatal(ok, err)
		}
		if _, err := d.store.UpdateQueue(ctx, "d", func(q *storage.Queue) error { q.Paused = true; return nil }); err != nil {
			t.Fatal(err)
		}
		if s := statuses(d.enqueue(t, 1, nil)); s[storage.StatusPending] != 1 {
			t.Fatalf("statuses: %v", s)
		}
	})
	t.Run("backlog", func(t *testing.T) {
		d := setupDirect(t, 1000)
		tasks := []storage.NewTask{{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{}`), Priority: 5}}
		if _, err := d.store.Enqueue(ctx, "d", tasks, nil); err != nil { // pending, as before
			t.Fatal(err)
		}
		if s := statuses(d.enqueue(t, 1, nil)); s[storage.StatusPending] != 1 {
			t.Fatalf("statuses behind a pending task: %v", s)
		}
	})
	t.Run("full", func(t *testing.T) {
		d := setupDirect(t, 2)
		if s := statuses(d.enqueue(t, 2, nil)); s[storage.StatusBuffered] != 2 {
			t.Fatalf("statuses: %v", s)
		}
		if s := statuses(d.enqueue(t, 1, nil)); s[storage.StatusPending] != 1 {
			t.Fatalf("statuses with a full buffer: %v", s)
		}
	})
}

// A task committed dispatched whose buffer entry was lost (Redis flushed after the
// enqueue) is re-added by the dispatcher's repair pass: Redis loss loses nothing.
func TestEnqueuedTaskSurvivesFlushedBuffer(t *testing.T) {
	ctx := context.Background()
	d := setupDirect(t, 1000)
	out := d.enqueue(t, 2, nil)
	if err := d.rdb.Del(ctx, d.buf.Key("d")).Err(); err != nil {
		t.Fatal(err)
	}
	if got := d.claim(t, 5); len(got) != 0 {
		t.Fatalf("claimed %d from a flushed buffer", len(got))
	}
	disp := dispatcher.New(d.store, d.buf, d.lc, nil, dispatcher.Config{RepairAfter: time.Nanosecond}, quiet)
	n, err := disp.RepairOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("repair re-added %d of 2", n)
	}
	got := d.claim(t, 5)
	if len(got) != 2 || (got[0].ID != out[0].Task.ID && got[0].ID != out[1].Task.ID) {
		t.Fatalf("claimed %d after repair", len(got))
	}
}
