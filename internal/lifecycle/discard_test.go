package lifecycle_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/storage"
)

// TestDiscardLogsTransitions: a discard, single or in batches, deletes the dead
// tasks and logs each one's transition from dead to discarded, like every other
// transition; a task that is not dead is neither deleted nor logged.
func TestDiscardLogsTransitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWorkflows(t)
	ids := make([]uuid.UUID, 4)
	tasks := make([]storage.NewTask, len(ids))
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		tasks[i] = storage.NewTask{ID: ids[i], Payload: json.RawMessage(`{}`), Priority: 5}
	}
	if _, err := b.lc.Enqueue(ctx, "wf", tasks, true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.disp.DispatchQueues(ctx, "wf"); err != nil {
		t.Fatal(err)
	}
	limits, _, err := b.lc.Limits().Get(ctx, "wf")
	if err != nil {
		t.Fatal(err)
	}
	claimed, _, err := b.lc.Claim(ctx, "w", "wf", limits, 3, 0)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claimed %d (%v), want 3", len(claimed), err)
	}
	for _, c := range claimed { // no retries in wf: each nack kills its task
		if _, err := b.lc.Nack(ctx, storage.Nack{TaskID: c.ID, LeaseToken: *c.LeaseToken, WorkerID: "w",
			Error: "boom", Retryable: true}); err != nil {
			t.Fatal(err)
		}
	}
	dead := []uuid.UUID{claimed[0].ID, claimed[1].ID, claimed[2].ID}
	if err := b.lc.Discard(ctx, "wf", dead[0]); err != nil {
		t.Fatal(err)
	}
	batches := 0
	n, err := b.lc.DiscardMany(ctx, "wf", nil, true, 1, func(int) { batches++ })
	if err != nil || n != 2 || batches != 2 {
		t.Fatalf("discarded %d in %d batches (%v), want 2 in 2", n, batches, err)
	}
	for _, id := range dead {
		if got := b.log.matching("task transition", map[string]string{"task_id": id.String(),
			"from_status": storage.StatusDead, "to_status": lifecycle.StatusDiscarded}); len(got) != 1 {
			t.Errorf("dead task %s: %d discard transitions logged, want 1", id, len(got))
		}
		if _, _, err := b.store.GetTask(ctx, "wf", id); err == nil {
			t.Errorf("dead task %s still stored", id)
		}
	}
	if got := b.log.matching("task transition", map[string]string{"to_status": lifecycle.StatusDiscarded}); len(got) != 3 {
		t.Errorf("%d discard transitions logged, want 3", len(got))
	}
}
