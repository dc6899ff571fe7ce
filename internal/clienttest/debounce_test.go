package clienttest_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
)

// TestDebounce: the Go SDK sends the debounce fields (durations rounded up to
// milliseconds) and reads debounce_key and debounced back; a bad combination is
// an ErrInvalidRequest.
func TestDebounce(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "docs", client.QueueSettings{}))

	first := must[*client.Task](t)(c.Enqueue(ctx, "docs", client.NewTask{Payload: 1, DebounceKey: "doc-1",
		Debounce: time.Minute}))
	if first.DebounceKey == nil || *first.DebounceKey != "doc-1" || first.Debounced != 0 ||
		first.ScheduledAt.Sub(first.CreatedAt) != time.Minute {
		t.Fatalf("first: %+v", first)
	}
	second := must[*client.Task](t)(c.Enqueue(ctx, "docs", client.NewTask{Payload: 2, Priority: 2, DebounceKey: "doc-1",
		Debounce: 90*time.Second + time.Microsecond, DebounceMax: 10 * time.Minute}))
	if second.ID != first.ID || second.Debounced != 1 || second.Priority != 2 || string(second.Payload) != "2" {
		t.Fatalf("second: %+v", second)
	}
	batch := must[[]client.Task](t)(c.EnqueueBatch(ctx, "docs", []client.NewTask{
		{Payload: 3, DebounceKey: "doc-1", Debounce: time.Minute}, {Payload: 4},
	}))
	if batch[0].ID != first.ID || batch[0].Debounced != 2 || batch[1].DebounceKey != nil {
		t.Fatalf("batch: %+v", batch)
	}
	got := must[*client.Task](t)(c.GetTask(ctx, "docs", first.ID))
	if got.Debounced != 2 || string(got.Payload) != "3" {
		t.Fatalf("get: %+v", got)
	}
	_, err := c.Enqueue(ctx, "docs", client.NewTask{Payload: 5, DebounceKey: "doc-1"})
	wantErr(t, err, http.StatusBadRequest, client.ErrInvalidRequest)
	_, err = c.Enqueue(ctx, "docs", client.NewTask{Payload: 5, DebounceKey: "doc-1", Debounce: time.Second,
		IdempotencyKey: "i"})
	wantErr(t, err, http.StatusBadRequest, client.ErrInvalidRequest)
}

// TestIdempotencyWindowSetting: the Go SDK sets and reads a queue's idempotency
// window (24 h by default).
func TestIdempotencyWindowSetting(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	q := must[*client.Queue](t)(c.CreateQueue(ctx, "a", client.QueueSettings{}))
	if q.IdempotencyWindowMs != 86_400_000 {
		t.Fatalf("default window %d", q.IdempotencyWindowMs)
	}
	q = must[*client.Queue](t)(c.UpdateQueue(ctx, "a", client.QueueSettings{IdempotencyWindow: client.Ptr(time.Hour)}))
	if q.IdempotencyWindowMs != 3_600_000 {
		t.Fatalf("window %d after the update", q.IdempotencyWindowMs)
	}
	_, err := c.UpdateQueue(ctx, "a", client.QueueSettings{IdempotencyWindow: client.Ptr(-time.Second)})
	wantErr(t, err, http.StatusBadRequest, client.ErrInvalidRequest)
}
