package storage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// TestJSONColumnsReadBackAsSent: payloads, results and progress come back as the
// JSON they were (as PostgreSQL's jsonb writes it), a JSON null as null, and a
// column that is NULL (no result yet, no progress) as nil, through the claim, the
// ack and a read.
func TestJSONColumnsReadBackAsSent(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	payloads := []string{`null`, `"text"`, `0`, `{"a": [1, "é", {"b": null}]}`, `[]`}
	var tasks []storage.NewTask
	for _, p := range payloads {
		tasks = append(tasks, storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(p), Priority: 1})
	}
	got, err := s.Enqueue(ctx, "q", tasks, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range got {
		task := e.Task
		if !bytes.Equal(task.Payload, []byte(payloads[i])) || task.Result != nil || task.Progress != nil {
			t.Fatalf("enqueued %s: payload %s, result %v, progress %v", payloads[i], task.Payload, task.Result, task.Progress)
		}
	}
	ids := dispatchAll(t, s)
	claimed, err := testenv.Claim(ctx, s, ids, "w", 30*time.Second)
	if err != nil || len(claimed) != len(payloads) {
		t.Fatalf("claimed %d: %v", len(claimed), err)
	}
	for i, task := range claimed {
		result := json.RawMessage(payloads[(i+1)%len(payloads)])
		if task.Payload == nil || task.Result != nil {
			t.Fatalf("claimed: payload %s, result %s", task.Payload, task.Result)
		}
		acked, err := s.Ack(ctx, "w", task.ID, *task.LeaseToken, result)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(acked.Result, result) {
			t.Fatalf("acked with %s: result %s", result, acked.Result)
		}
		read, _, err := s.GetTask(ctx, "q", task.ID)
		if err != nil || !bytes.Equal(read.Result, result) || !bytes.Equal(read.Payload, task.Payload) {
			t.Fatalf("read back: payload %s (claimed %s), result %s (acked %s): %v", read.Payload, task.Payload, read.Result, result, err)
		}
	}
}
