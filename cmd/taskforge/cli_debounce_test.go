package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/taskforge/taskforge/client"
)

// TestCLITaskEnqueueDebounce: --debounce-key with --debounce creates, then replaces
// the waiting task; get shows the key and the count; a file line may carry the
// fields; the flags' bad combinations are usage errors and the server's refusals
// exit as theirs.
func TestCLITaskEnqueueDebounce(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.s.CreateQueue("q", nil)

	var first, second client.Task
	e.json(&first, "task", "enqueue", "q", "--payload", "1", "--debounce-key", "doc", "--debounce", "1m")
	e.json(&second, "task", "enqueue", "q", "--payload", "2", "--debounce-key", "doc", "--debounce", "1m",
		"--debounce-max", "5m")
	if second.ID != first.ID || second.Debounced != 1 || *second.DebounceKey != "doc" {
		t.Fatalf("enqueued %+v then %+v", first, second)
	}
	r := e.want(0, "task", "get", "q", first.ID)
	contains(t, "get output", r.stdout, "debounce_key:", "doc", "debounced:", "1")

	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(path, []byte(`{"payload": 3, "debounce_key": "doc", "debounce_ms": 60000}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.want(0, "task", "enqueue", "q", "--file", path)
	var got client.Task
	e.json(&got, "task", "get", "q", first.ID)
	if got.Debounced != 2 || string(got.Payload) != "3" {
		t.Fatalf("after the file: %+v", got)
	}

	e.want(exitUsage, "task", "enqueue", "q", "--payload", "1", "--debounce", "1m")
	e.want(exitUsage, "task", "enqueue", "q", "--payload", "1", "--debounce-key", "doc", "--debounce", "1m", "--delay", "1h")
	e.want(exitUsage, "task", "enqueue", "q", "--payload", "1", "--debounce-key", "doc", "--debounce", "1m", "--idempotency-key", "i")
	e.want(exitUsage, "task", "enqueue", "q", "--file", path, "--debounce-key", "doc")
	e.want(exitUsage, "task", "enqueue", "q", "--payload", "1", "--debounce-key", "doc") // the server's 400
}

// TestCLIQueueIdempotencyWindow: queue create and update take --idempotency-window,
// queue get shows it, and the server refuses one out of range.
func TestCLIQueueIdempotencyWindow(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	var q client.Queue
	e.json(&q, "queue", "create", "w", "--idempotency-window", "2h")
	if q.IdempotencyWindowMs != 7_200_000 {
		t.Fatalf("created %+v", q)
	}
	e.json(&q, "queue", "update", "w", "--idempotency-window", "0s")
	if q.IdempotencyWindowMs != 0 {
		t.Fatalf("updated %+v", q)
	}
	r := e.want(0, "queue", "get", "w")
	contains(t, "queue get", r.stdout, "key_window:", "0s")
	e.want(exitUsage, "queue", "update", "w", "--idempotency-window", "721h")
}
