package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/storage"
)

// statementCounter is a pgx tracer that counts the statements a pool sends,
// BEGIN and COMMIT included.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestEnqueueWithoutKeysIsOneStatement: an enqueue whose tasks carry no idempotency
// key is one statement, its own transaction (one round trip with its commit),
// whether its tasks go to the buffer or wait pending, and the pending ones still
// wake the dispatchers. With a key it is a transaction, so that a conflict fails the
// whole batch; an unknown queue still fails with ErrQueueNotFound either way.
func TestEnqueueWithoutKeysIsOneStatement(t *testing.T) {
	ctx := context.Background()
	url := testenv.NewDatabase(t)
	counter := &statementCounter{}
	pool, err := storage.Connect(ctx, url, 4, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = counter })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store := storage.New(pool)
	if _, err := store.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 2}); err != nil {
		t.Fatal(err)
	}
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close(ctx) })
	if _, err := listener.Exec(ctx, "LISTEN "+storage.DueChannel); err != nil {
		t.Fatal(err)
	}
	task := func(key *string, at *time.Time) storage.NewTask {
		nt := storage.NewTask{ID: uuid.New(), Payload: json.RawMessage(`{}`), Priority: 5, ScheduledAt: at, IdempotencyKey: key}
		if key != nil {
			nt.Fingerprint = []byte(*key)
		}
		return nt
	}
	later := time.Now().Add(time.Hour)
	key := "k1"

	for _, tc := range []struct {
		name       string
		buffered   bool
		tasks      []storage.NewTask
		statements int64
		status     string
		notify     bool
	}{
		{"due now, buffered", true, []storage.NewTask{task(nil, nil), task(nil, nil)}, 1, storage.StatusBuffered, false},
		{"with a key", true, []storage.NewTask{task(&key, nil)}, 3, storage.StatusBuffered, false},
		{"due now, unbuffered", false, []storage.NewTask{task(nil, nil)}, 1, storage.StatusPending, true},
		{"scheduled later", true, []storage.NewTask{task(nil, &later)}, 1, storage.StatusPending, true},
	} {
		before := counter.n.Load()
		enqueue := store.Enqueue
		if tc.buffered {
			enqueue = func(ctx context.Context, queue string, tasks []storage.NewTask, tp *string) ([]storage.Enqueued, error) {
				return store.EnqueueWith(ctx, queue, tasks, storage.EnqueueOptions{Traceparent: tp, Buffered: true})
			}
		}
		out, err := enqueue(ctx, "q", tc.tasks, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := counter.n.Load() - before; got != tc.statements {
			t.Errorf("%s: %d statements, want %d", tc.name, got, tc.statements)
		}
		for i, e := range out {
			if !e.Created || e.Task.ID != tc.tasks[i].ID || e.Task.Status != tc.status || e.Task.MaxRetries != 2 {
				t.Errorf("%s: task %d came back %+v, want created, %s, the queue's 2 retries", tc.name, i, e, tc.status)
			}
		}
		if tc.notify {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil || n.Payload != "q" {
				t.Errorf("%s: no wake-up for queue q: %v %+v", tc.name, n, err)
			}
		}
	}
	// Each wake-up above came from its own enqueue: the buffered ones sent none.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if n, err := listener.WaitForNotification(wctx); err == nil {
		t.Errorf("an enqueue into the buffer woke the dispatchers: %+v", n)
	}

	again, err := store.EnqueueWith(ctx, "q", []storage.NewTask{task(&key, nil)}, storage.EnqueueOptions{Buffered: true})
	if err != nil || again[0].Created {
		t.Errorf("the same key again: %+v %v, want the earlier task, not created", again, err)
	}
	for _, tasks := range [][]storage.NewTask{{task(nil, nil)}, {task(&key, nil)}} {
		if _, err := store.EnqueueWith(ctx, "nope", tasks, storage.EnqueueOptions{Buffered: true}); !errors.Is(err, storage.ErrQueueNotFound) {
			t.Errorf("enqueue into a missing queue: %v, want ErrQueueNotFound", err)
		}
	}
}

// TestEnqueueRefsStoreTheWholeTask: an enqueue that reads back only the tasks'
// refs (EnqueueOptions.Refs) stores every field a whole one does, returns the refs
// as stored, and returns a task matched by its idempotency key whole. The optional
// columns go as NULL arrays when no task of the batch sets them, and per task when
// some do; either way each task gets its own value or the queue's default.
func TestEnqueueRefsStoreTheWholeTask(t *testing.T) {
	ctx := context.Background()
	store := newStore(t) // queue "q", 3 retries
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	zero, thirty, key, group := 0, 30, "k", "tenant"
	traceparent := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	plain := storage.NewTask{ID: uuid.New(), Payload: json.RawMessage(`{"n":1}`), Priority: 5}
	mixed := []storage.NewTask{
		{ID: uuid.New(), Payload: json.RawMessage(`{"n":2}`), Priority: 2, MaxRetries: &zero, TimeoutSeconds: &thirty, Group: &group},
		{ID: uuid.New(), Payload: json.RawMessage(`{"n":3}`), Priority: 7, ScheduledAt: &later},
		{ID: uuid.New(), Payload: json.RawMessage(`{"n":4}`), Priority: 5, IdempotencyKey: &key, Fingerprint: []byte("fp")},
	}
	opts := storage.EnqueueOptions{Traceparent: &traceparent, Buffered: true, Refs: true}
	var out []storage.Enqueued
	for _, batch := range [][]storage.NewTask{{plain}, mixed} {
		got, err := store.EnqueueWith(ctx, "q", batch, opts)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got...)
	}
	type want struct {
		status     string
		maxRetries int
		timeout    *int
		scheduled  *time.Time
		key        *string
	}
	wants := []want{
		{storage.StatusBuffered, 3, nil, nil, nil},
		{storage.StatusBuffered, 0, &thirty, nil, nil},
		{storage.StatusPending, 3, nil, &later, nil},
		{storage.StatusBuffered, 3, nil, nil, &key},
	}
	for i, e := range out {
		stored, _, err := store.GetTask(ctx, "q", e.Task.ID)
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		w := wants[i]
		ref := e.Task
		if !e.Created || ref.Queue != "q" || ref.Status != stored.Status || ref.Priority != stored.Priority ||
			!ref.ScheduledAt.Equal(stored.ScheduledAt) || ref.Traceparent == nil || *ref.Traceparent != traceparent ||
			(ref.Group == nil) != (stored.Group == nil) || (ref.Group != nil && *ref.Group != *stored.Group) ||
			(i == 1) != (ref.Group != nil) {
			t.Errorf("task %d: ref %+v does not match the stored task %+v", i, ref, stored)
		}
		if stored.Status != w.status || stored.MaxRetries != w.maxRetries ||
			(stored.TimeoutSeconds == nil) != (w.timeout == nil) || (w.timeout != nil && *stored.TimeoutSeconds != *w.timeout) ||
			(w.scheduled != nil && !stored.ScheduledAt.Equal(*w.scheduled)) ||
			(stored.IdempotencyKey == nil) != (w.key == nil) || stored.Traceparent == nil || *stored.Traceparent != traceparent {
			t.Errorf("task %d stored as %+v, want %+v", i, stored, w)
		}
	}
	repeat := mixed[2]
	repeat.ID = uuid.New() // another request with the same key
	again, err := store.EnqueueWith(ctx, "q", []storage.NewTask{repeat}, opts)
	if err != nil || again[0].Created || again[0].Task.ID != mixed[2].ID || string(again[0].Task.Payload) != `{"n": 4}` {
		t.Errorf("the same key again: %+v %v, want the earlier task whole, not created", again, err)
	}
}
