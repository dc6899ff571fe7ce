package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/storage"
)

// duplicateOf fails unless resp is 409 duplicate_request naming task id.
func duplicateOf(t *testing.T, resp testserver.Response, id string) {
	t.Helper()
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			TaskID  string `json:"task_id"`
		} `json:"error"`
	}
	resp.JSON(t, &body)
	if resp.Status != http.StatusConflict || body.Error.Code != "duplicate_request" || body.Error.TaskID != id {
		t.Fatalf("%d %s, want 409 duplicate_request naming %s", resp.Status, resp.Body, id)
	}
}

// deadTask enqueues a task with key into queue and makes it dead.
func deadTask(t *testing.T, s *testserver.Instance, queue, key string) testserver.Task {
	t.Helper()
	task := s.Enqueue(queue, map[string]any{"payload": 1, "idempotency_key": key, "max_retries": 0})
	polled := s.Poll("w", []string{queue}, 1, 5000)
	if len(polled) != 1 || polled[0].ID != task.ID {
		t.Fatalf("polled %+v, want %s", polled, task.ID)
	}
	if resp := s.Nack("w", polled[0], "boom", map[string]any{"retryable": false}); resp.Status != http.StatusOK {
		t.Fatalf("nack: %d %s", resp.Status, resp.Body)
	}
	return task
}

// TestIdempotencyWindow: a key stays reserved after its task is discarded from the
// DLQ (409 duplicate_request naming the task, same request or not), is free once the
// window has ended (a new task), and with a window of 0 is free at once; a task
// deleted by retention keeps its key reserved too.
func TestIdempotencyWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testserver.Start(t, testserver.Options{})
	var q storage.Queue
	s.Must(http.StatusCreated, "POST", "/queues", map[string]any{"name": "q"}).JSON(t, &q)
	if q.IdempotencyWindowMs == nil || *q.IdempotencyWindowMs != 86_400_000 {
		t.Fatalf("default window: %+v", q.IdempotencyWindowMs)
	}
	db, err := pgx.Connect(ctx, s.Config.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(ctx) })

	dead := deadTask(t, s, "q", "order-1")
	s.Must(http.StatusNoContent, "DELETE", "/queues/q/dlq/"+dead.ID, nil)
	duplicateOf(t, s.Do("POST", "/queues/q/tasks", map[string]any{"payload": 1, "idempotency_key": "order-1", "max_retries": 0}), dead.ID)
	duplicateOf(t, s.Do("POST", "/queues/q/tasks", map[string]any{"payload": 2, "idempotency_key": "order-1"}), dead.ID)
	resp := s.Do("POST", "/queues/q/tasks/batch", map[string]any{"tasks": []map[string]any{
		{"payload": 0}, {"payload": 2, "idempotency_key": "order-1"}}})
	duplicateOf(t, resp, dead.ID)
	if n := taskCount(t, s, "q"); n != 0 {
		t.Fatalf("%d tasks after the refusals, want 0", n)
	}

	// The window ends: the key is free again.
	if _, err := db.Exec(ctx, `UPDATE idempotency_keys SET created_at = created_at - interval '2 days',
		reserved_until = now() - interval '1 second' WHERE queue = 'q' AND key = 'order-1'`); err != nil {
		t.Fatal(err)
	}
	again := s.Enqueue("q", map[string]any{"payload": 1, "idempotency_key": "order-1"})
	if again.ID == dead.ID {
		t.Fatal("the key's new task has the old id")
	}
	s.Must(http.StatusOK, "POST", "/queues/q/tasks", map[string]any{"payload": 1, "idempotency_key": "order-1"})

	// A window of 0 keeps nothing once the task is gone.
	s.Must(http.StatusCreated, "POST", "/queues", map[string]any{"name": "z", "idempotency_window_ms": 60_000})
	s.Must(http.StatusOK, "PATCH", "/queues/z", map[string]any{"idempotency_window_ms": 0})
	dead2 := deadTask(t, s, "z", "order-2")
	s.Must(http.StatusNoContent, "DELETE", "/queues/z/dlq/"+dead2.ID, nil)
	s.Must(http.StatusCreated, "POST", "/queues/z/tasks", map[string]any{"payload": 1, "idempotency_key": "order-2"})

	// Retention: a done task deleted by it keeps its key within the window.
	s.Must(http.StatusCreated, "POST", "/queues", map[string]any{"name": "r", "idempotency_window_ms": 3_600_000,
		"retention": map[string]any{"done_ms": 60_000}})
	done := s.Enqueue("r", map[string]any{"payload": 3, "idempotency_key": "order-3"})
	for {
		polled := s.Poll("w", []string{"r"}, 10, 5000)
		found := false
		for _, p := range polled {
			s.Must(http.StatusOK, "POST", "/workers/ack", map[string]any{"worker_id": "w", "task_id": p.ID, "lease_token": p.LeaseToken})
			found = found || p.ID == done.ID
		}
		if found {
			break
		}
	}
	for _, table := range []string{"tasks", "task_history"} {
		if _, err := db.Exec(ctx, `UPDATE `+table+` SET created_at = created_at - interval '10 minutes',
			finished_at = finished_at - interval '10 minutes' WHERE id = $1`, done.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `UPDATE attempt_history SET task_finished_at = task_finished_at - interval '10 minutes'
		WHERE task_id = $1`, done.ID); err != nil {
		t.Fatal(err)
	}
	pool, err := storage.Connect(ctx, s.Config.DatabaseURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := storage.New(pool)
	if _, err := store.DeleteExpiredTasks(ctx, storage.DefaultRetention(7*24*time.Hour), 100, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// (Finished, the task is in history, where r's shorter retention expires it.)
	if _, err := store.DeleteExpiredHistory(ctx, storage.DefaultRetention(7*24*time.Hour), 100, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if resp := s.Do("GET", "/queues/r/tasks/"+done.ID, nil); resp.Status != http.StatusNotFound {
		t.Fatalf("the expired task is still there: %d", resp.Status)
	}
	duplicateOf(t, s.Do("POST", "/queues/r/tasks", map[string]any{"payload": 3, "idempotency_key": "order-3"}), done.ID)
}

// TestIdempotencyWindowBadInput: a window out of range, null or not an integer is a
// 400 that changes nothing.
func TestIdempotencyWindowBadInput(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.Must(http.StatusCreated, "POST", "/queues", map[string]any{"name": "q", "idempotency_window_ms": 60_000})
	for _, v := range []any{-1, 2_592_000_001, nil, "1h", 1.5} {
		if resp := s.Do("PATCH", "/queues/q", map[string]any{"idempotency_window_ms": v}); resp.Status != http.StatusBadRequest {
			t.Errorf("PATCH idempotency_window_ms %v: %d %s", v, resp.Status, resp.Body)
		}
		if resp := s.Do("POST", "/queues", map[string]any{"name": "r", "idempotency_window_ms": v}); resp.Status != http.StatusBadRequest {
			t.Errorf("POST idempotency_window_ms %v: %d %s", v, resp.Status, resp.Body)
		}
	}
	var q map[string]json.RawMessage
	s.Must(http.StatusOK, "GET", "/queues/q", nil).JSON(t, &q)
	if string(q["idempotency_window_ms"]) != "60000" {
		t.Fatalf("window after the refusals: %s", q["idempotency_window_ms"])
	}
	s.Must(http.StatusNotFound, "GET", "/queues/r", nil)
}

// TestIdempotencyWindowBulkDiscardAndQueueDelete: the keys of tasks discarded from the
// DLQ in bulk, by ids or all at once, stay reserved for the window like a single
// discard's; deleting the queue (which holds no unfinished or dead task then) frees
// its keys, reserved or of its done tasks: a queue made again under its name starts
// with none.
func TestIdempotencyWindowBulkDiscardAndQueueDelete(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.Must(http.StatusCreated, "POST", "/queues", map[string]any{"name": "q"})
	a, b := deadTask(t, s, "q", "bulk-a"), deadTask(t, s, "q", "bulk-b")
	var out struct {
		Discarded int `json:"discarded"`
	}
	s.Must(http.StatusOK, "DELETE", "/queues/q/dlq", map[string]any{"ids": []string{a.ID}}).JSON(t, &out)
	if out.Discarded != 1 {
		t.Fatalf("discard by ids: %+v", out)
	}
	s.Must(http.StatusOK, "DELETE", "/queues/q/dlq", map[string]any{"all": true}).JSON(t, &out)
	if out.Discarded != 1 {
		t.Fatalf("discard all: %+v", out)
	}
	duplicateOf(t, s.Do("POST", "/queues/q/tasks", map[string]any{"payload": 1, "idempotency_key": "bulk-a", "max_retries": 0}), a.ID)
	duplicateOf(t, s.Do("POST", "/queues/q/tasks", map[string]any{"payload": 1, "idempotency_key": "bulk-b", "max_retries": 0}), b.ID)
	live := s.Enqueue("q", map[string]any{"payload": 1, "idempotency_key": "live"})
	polled := s.Poll("w", []string{"q"}, 1, 5000)
	if len(polled) != 1 || polled[0].ID != live.ID {
		t.Fatalf("polled %+v, want %s", polled, live.ID)
	}
	s.Must(http.StatusOK, "POST", "/workers/ack", map[string]any{"worker_id": "w", "task_id": live.ID, "lease_token": polled[0].LeaseToken})
	s.Must(http.StatusOK, "POST", "/queues/q/tasks", map[string]any{"payload": 1, "idempotency_key": "live"})

	s.Must(http.StatusNoContent, "DELETE", "/queues/q", nil)
	s.Must(http.StatusCreated, "POST", "/queues", map[string]any{"name": "q"})
	for _, key := range []string{"bulk-a", "bulk-b", "live"} {
		var task testserver.Task
		s.Must(http.StatusCreated, "POST", "/queues/q/tasks", map[string]any{"payload": 1, "idempotency_key": key}).JSON(t, &task)
		if task.ID == a.ID || task.ID == b.ID || task.ID == live.ID {
			t.Fatalf("key %s: the old task %s came back", key, task.ID)
		}
	}
}
