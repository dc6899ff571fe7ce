package storage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
)

// TestHotPathStatementsCountThemselves: with the tally triggers of tasks and
// attempts switched off, an enqueue, a claim and a plain ack sent through the hot
// pool still leave exact counts (the statements append their own deltas), while the
// same enqueue through the main pool, where the statements leave counting to the
// triggers, leaves the counts short: each change is counted by one of the two.
func TestHotPathStatementsCountThemselves(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for _, stmt := range []string{
		`ALTER TABLE tasks DISABLE TRIGGER tasks_tally_insert`,
		`ALTER TABLE tasks DISABLE TRIGGER tasks_tally_update`,
		`ALTER TABLE attempts DISABLE TRIGGER attempts_tally_update`,
	} {
		if _, err := s.Pool().Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.EnqueueBuffered(ctx, "q", newTasks(3), nil); err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	if err := s.Pool().QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM tasks`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.ClaimTasks(ctx, ids, "w", time.Minute)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claimed %d of 3: %v", len(claimed), err)
	}
	if _, err := s.Ack(ctx, "w", claimed[0].ID, *claimed[0].LeaseToken, json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	if drift, err := s.TallyDrift(ctx, "q"); err != nil || len(drift) > 0 {
		t.Fatalf("counts after the hot path drift from count(*): %v %v", drift, err)
	}
	st, err := s.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.Depth[storage.StatusDone] != 1 || st.Depth["executing"] != 2 || st.ThroughputPerSec == 0 {
		t.Fatalf("stats after the hot path: %+v", st)
	}

	mainOnly := storage.New(s.Pool())
	if _, err := mainOnly.Enqueue(ctx, "q", newTasks(1), nil); err != nil {
		t.Fatal(err)
	}
	if drift, err := s.TallyDrift(ctx, "q"); err != nil || drift["pending"] != -1 {
		t.Fatalf("an enqueue on the main pool without its trigger: drift %v (%v), want one pending task uncounted", drift, err)
	}
}

// TestPlainLeaseTokens: a task outside a workflow is claimed with a version 8 lease
// token and a workflow step with a version 4 one, and the plain ack leaves a
// workflow step alone even with its current token, so a step's dependents are
// never skipped.
func TestPlainLeaseTokens(t *testing.T) {
	ctx := context.Background()
	s := workflowStore(t, "wq")
	if _, err := s.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 3}); err != nil {
		t.Fatal(err)
	}
	w := submit(t, s, step("a", "wq"), step("b", "wq", "a"))
	steps := claimAll(t, s, "wq", "w")
	if len(steps) != 1 || storage.PlainLeaseToken(*steps[0].LeaseToken) || steps[0].LeaseToken.Version() != 4 {
		t.Fatalf("workflow step claimed with token %v (steps %d)", steps[0].LeaseToken, len(steps))
	}
	if _, err := s.Enqueue(ctx, "q", newTasks(1), nil); err != nil {
		t.Fatal(err)
	}
	plain := claimAll(t, s, "q", "w")
	if len(plain) != 1 || !storage.PlainLeaseToken(*plain[0].LeaseToken) {
		t.Fatalf("plain task claimed with token %v", plain[0].LeaseToken)
	}

	item := storage.AckItem{TaskID: steps[0].ID, LeaseToken: *steps[0].LeaseToken, WorkerID: "w"}
	if acked, err := s.AckPlainMany(ctx, []storage.AckItem{item}); err != nil || len(acked) != 0 {
		t.Fatalf("plain ack of a workflow step: acked %d (%v), want none", len(acked), err)
	}
	ack(t, s, steps[0])
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "running", "a": "done", "b": "pending"})
}
