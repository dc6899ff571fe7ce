package storage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// TestHotPathStatementsCountThemselves: with the tally triggers of tasks and
// attempts switched off, an enqueue, a claim and the plain acks (whole and by ref)
// sent through the hot pool still leave exact counts (the statements append their own deltas), while the
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
	if _, err := s.EnqueueWith(ctx, "q", newTasks(3), storage.EnqueueOptions{Buffered: true}); err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	if err := s.Pool().QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM tasks`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	claimed, err := testenv.Claim(ctx, s, ids, "w", time.Minute)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claimed %d of 3: %v", len(claimed), err)
	}
	if _, err := s.Ack(ctx, "w", claimed[0].ID, *claimed[0].LeaseToken, json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	item := storage.AckItem{TaskID: claimed[1].ID, LeaseToken: *claimed[1].LeaseToken, WorkerID: "w"}
	if acked, err := s.AckMany(ctx, []storage.AckItem{item}, true); err != nil || len(acked) != 1 {
		t.Fatalf("acked %d of 1 by its ref: %v", len(acked), err)
	}
	if drift, err := s.TallyDrift(ctx, "q"); err != nil || len(drift) > 0 {
		t.Fatalf("counts after the hot path drift from count(*): %v %v", drift, err)
	}
	st, err := s.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.Depth[storage.StatusDone] != 2 || st.Depth["executing"] != 1 || st.ThroughputPerSec == 0 {
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
// token and a workflow step with a version 4 one; the plain ack statement leaves a
// workflow step alone even with its current token, and AckMany sends a batch
// holding a step's token to the statement that runs the cascade, even when it asks
// for refs, so a step's dependents are never skipped.
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
	n := 0
	rows, err := s.Pool().Query(ctx, storage.AckPlainTasks,
		[]uuid.UUID{item.TaskID}, []uuid.UUID{item.LeaseToken}, []string{"w"}, []*string{nil}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		n++
	}
	if rows.Close(); rows.Err() != nil || n != 0 {
		t.Fatalf("plain ack statement on a workflow step: acked %d (%v), want none", n, rows.Err())
	}
	if acked, err := s.AckMany(ctx, []storage.AckItem{item, {TaskID: plain[0].ID, LeaseToken: *plain[0].LeaseToken, WorkerID: "w"}}, true); err != nil || len(acked) != 2 {
		t.Fatalf("a batch of a step's ack and a plain one: acked %d (%v), want both", len(acked), err)
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "running", "a": "done", "b": "pending"})
}

// TestAckPlainRefs: the ack that reads back refs marks the task done and its
// attempt succeeded as the whole one does, returns the refs as stored, and acks
// nothing for a stale token or a second ack of the same task.
func TestAckPlainRefs(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	traceparent := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	enq, err := s.EnqueueWith(ctx, "q", newTasks(2), storage.EnqueueOptions{Buffered: true, Traceparent: &traceparent})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := testenv.Claim(ctx, s, []uuid.UUID{enq[0].Task.ID, enq[1].Task.ID}, "w", time.Minute)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claimed %d of 2: %v", len(claimed), err)
	}
	items := []storage.AckItem{
		{TaskID: claimed[0].ID, LeaseToken: *claimed[0].LeaseToken, WorkerID: "w", Result: json.RawMessage(`{"ok":true}`)},
		{TaskID: claimed[1].ID, LeaseToken: uuid.New(), WorkerID: "w"},
	}
	acked, err := s.AckMany(ctx, items, true)
	if err != nil || len(acked) != 1 {
		t.Fatalf("acked %d, want only the task whose lease is held: %v", len(acked), err)
	}
	ref := acked[claimed[0].ID]
	stored, attempts, err := s.GetTask(ctx, "q", claimed[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Status != storage.StatusDone || string(stored.Result) != `{"ok": true}` || len(attempts) != 1 ||
		attempts[0].Status != "succeeded" || attempts[0].FinishedAt == nil {
		t.Fatalf("after the ack by ref: %+v, attempts %+v", stored, attempts)
	}
	if ref.ID != stored.ID || ref.Queue != "q" || ref.Status != storage.StatusDone || ref.Attempts != 1 ||
		ref.LeaseToken == nil || *ref.LeaseToken != *claimed[0].LeaseToken || ref.AttemptStartedAt == nil ||
		!ref.AttemptStartedAt.Equal(*stored.AttemptStartedAt) || !ref.UpdatedAt.Equal(stored.UpdatedAt) ||
		ref.FinishedAt == nil || !ref.FinishedAt.Equal(*stored.FinishedAt) ||
		ref.Traceparent == nil || *ref.Traceparent != traceparent {
		t.Errorf("ref %+v does not match the stored task %+v", ref, stored)
	}
	if again, err := s.AckMany(ctx, items[:1], true); err != nil || len(again) != 0 {
		t.Errorf("a second ack of a done task acked %d: %v", len(again), err)
	}
	if other, _, err := s.GetTask(ctx, "q", claimed[1].ID); err != nil || other.Status != storage.StatusExecuting {
		t.Errorf("the task acked with a stale token is %s (%v), want still executing", other.Status, err)
	}
}

// TestHotPathTriggersCallNoSQLFunctionInWhen: PostgreSQL compiles a trigger's WHEN
// in every statement that may fire it, and inlining a SQL-language function there
// parses and analyses its body each time: a claim and an ack paid for
// group_tally_written_inline() so until migration 0031. No trigger of the tables a
// task's path writes calls a SQL function in its WHEN.
func TestHotPathTriggersCallNoSQLFunctionInWhen(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	rows, err := s.Pool().Query(context.Background(), `SELECT t.tgrelid::regclass::text || '.' || t.tgname || ' calls ' || p.proname
		FROM pg_trigger t
		JOIN pg_class c ON c.oid = t.tgrelid
		JOIN pg_proc p ON p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'sql')
			AND p.pronamespace = 'public'::regnamespace
		WHERE t.tgqual IS NOT NULL
			AND (c.relname IN ('tasks', 'attempts', 'queue_tally_delta', 'group_tally_delta')
				OR c.relname LIKE 'task\_history%' OR c.relname LIKE 'attempt\_history%')
			AND pg_get_triggerdef(t.oid) ~ ('\m' || p.proname || '\(')
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("trigger %s in its WHEN", f)
	}
}
