package storage_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
)

// TestAckAndClaimCommitTogether: AckAndClaim acks one task and claims another in
// one transaction; when the claim fails (a trigger here refuses it), the ack did
// not take effect either; a workflow step's ack is refused before anything runs.
func TestAckAndClaimCommitTogether(t *testing.T) {
	t.Parallel()
	db := caseDB(t)
	ctx := context.Background()
	r := newRig(t, db)
	buffered := func() uuid.UUID {
		id := r.enqueue(3, 0)
		if _, err := r.s.DispatchDue(ctx, "q", 100, 1<<40); err != nil {
			t.Fatal(err)
		}
		return id
	}
	claimOf := func(id uuid.UUID) []storage.ClaimItem { return []storage.ClaimItem{{TaskID: id, WorkerID: worker}} }

	running, next := r.start(3, 0), buffered()
	acked, claimed, err := r.s.AckAndClaim(ctx, []storage.AckItem{ackOf(running)}, claimOf(next), lease)
	if err != nil {
		t.Fatal(err)
	}
	if a := acked[running.ID]; a.Status != storage.StatusDone || len(acked) != 1 {
		t.Fatalf("acked %+v, want %s done", acked, running.ID)
	}
	if c := claimed[next]; c.Status != storage.StatusExecuting || c.ClaimedBy == nil || *c.ClaimedBy != worker {
		t.Fatalf("claimed %+v, want %s executing for %s", claimed, next, worker)
	}
	if got, _ := r.get(running.ID); got.Status != storage.StatusDone {
		t.Fatalf("acked task reads %s", got.Status)
	}

	running, next = r.start(3, 0), buffered()
	if _, err := db.Pool().Exec(ctx, `
		CREATE FUNCTION refuse_claims() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'claim refused by the test'; END $$;
		CREATE TRIGGER refuse_claims BEFORE UPDATE ON tasks FOR EACH ROW
			WHEN (NEW.status = 'executing' AND OLD.status <> 'executing') EXECUTE FUNCTION refuse_claims();`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.s.AckAndClaim(ctx, []storage.AckItem{ackOf(running)}, claimOf(next), lease); err == nil {
		t.Fatal("AckAndClaim succeeded with its claim refused")
	}
	if _, err := db.Pool().Exec(ctx, `DROP TRIGGER refuse_claims ON tasks; DROP FUNCTION refuse_claims()`); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.get(running.ID); got.Status != storage.StatusExecuting {
		t.Fatalf("the ack of a failed AckAndClaim took effect: %s", got.Status)
	}
	if got, _ := r.get(next); got.Status != storage.StatusBuffered {
		t.Fatalf("the task of the failed claim reads %s, want still buffered", got.Status)
	}

	step := ackOf(running)
	step.LeaseToken = uuid.New() // version 4: a workflow step's token
	if _, _, err := r.s.AckAndClaim(ctx, []storage.AckItem{step}, nil, lease); err == nil {
		t.Fatal("AckAndClaim took a workflow step's ack")
	}
}
