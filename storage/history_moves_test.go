package storage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// wantInHistory fails unless each id is in task_history with status (and not in
// tasks), with exactly attempts attempts in attempt_history (none left in attempts).
func wantInHistory(t *testing.T, s *storage.Store, status string, attempts int, ids ...uuid.UUID) {
	t.Helper()
	for _, id := range ids {
		var live, liveAttempts, old, oldAttempts int
		var got string
		err := s.Pool().QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM tasks WHERE id = $1), (SELECT count(*) FROM attempts WHERE task_id = $1),
			(SELECT count(*) FROM task_history WHERE id = $1), (SELECT count(*) FROM attempt_history WHERE task_id = $1),
			coalesce((SELECT status FROM task_history WHERE id = $1), '')`, id).Scan(&live, &liveAttempts, &old, &oldAttempts, &got)
		if err != nil {
			t.Fatal(err)
		}
		if live != 0 || liveAttempts != 0 || old != 1 || oldAttempts != attempts || got != status {
			t.Errorf("task %s: %d rows and %d attempts in tasks, %d rows (%q) and %d attempts in history; want it %s in history with %d attempts",
				id, live, liveAttempts, old, got, oldAttempts, status, attempts)
		}
	}
}

// TestFinishingMovesIntoHistory: every transition that finishes a task moves it and
// its attempts into history in its own transaction, and the counts stay exact.
func TestFinishingMovesIntoHistory(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.Enqueue(ctx, "q", newTasks(9), nil); err != nil {
		t.Fatal(err)
	}
	ids := dispatchAll(t, s)
	claimed, err := testenv.Claim(ctx, s, ids[:5], "w", time.Minute)
	if err != nil || len(claimed) != 5 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	acked, nacked, expired, stopped, single := claimed[0], claimed[1], claimed[2], claimed[3], claimed[4]

	if _, err := s.Ack(ctx, "w", acked.ID, *acked.LeaseToken, json.RawMessage(`{"ok":1}`)); err != nil {
		t.Fatal(err)
	}
	wantInHistory(t, s, "done", 1, acked.ID)

	if _, err := s.Nack(ctx, storage.Nack{TaskID: nacked.ID, LeaseToken: *nacked.LeaseToken, WorkerID: "w", Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	wantInHistory(t, s, "dead", 1, nacked.ID)

	// A lease that expires on the last attempt: the reclaim kills the task.
	if _, err := s.Pool().Exec(ctx, `UPDATE tasks SET max_retries = 0, lease_expires_at = now() - interval '1 second' WHERE id = $1`, expired.ID); err != nil {
		t.Fatal(err)
	}
	if r, err := s.ReclaimExpired(ctx, 100); err != nil || len(r) != 1 {
		t.Fatalf("reclaim: %d %v", len(r), err)
	}
	wantInHistory(t, s, "dead", 1, expired.ID)

	// A cancel of an executing task asks its worker; its nack ends it cancelled.
	if _, err := s.CancelTask(ctx, "q", stopped.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Nack(ctx, storage.Nack{TaskID: stopped.ID, LeaseToken: *stopped.LeaseToken, WorkerID: "w", Error: "stopped", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	wantInHistory(t, s, "cancelled", 1, stopped.ID)

	// The batch ack (one worker's several tasks).
	if _, err := s.AckMany(ctx, []storage.AckItem{{TaskID: single.ID, LeaseToken: *single.LeaseToken, WorkerID: "w"}}, true); err != nil {
		t.Fatal(err)
	}
	wantInHistory(t, s, "done", 1, single.ID)

	// Cancels of waiting tasks: one, then in bulk by id, then the rest of the queue.
	if _, err := s.CancelTask(ctx, "q", ids[5]); err != nil {
		t.Fatal(err)
	}
	wantInHistory(t, s, "cancelled", 0, ids[5])
	if _, err := s.CancelTasks(ctx, "q", ids[6:8]); err != nil {
		t.Fatal(err)
	}
	wantInHistory(t, s, "cancelled", 0, ids[6:8]...)
	if _, err := s.CancelWaiting(ctx, "q", []string{storage.StatusPending, "claimed"}, 10, nil); err != nil {
		t.Fatal(err)
	}
	wantInHistory(t, s, "cancelled", 0, ids[8])

	var live int
	if err := s.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM tasks) + (SELECT count(*) FROM attempts)`).Scan(&live); err != nil || live != 0 {
		t.Errorf("rows left in tasks and attempts: %d (%v)", live, err)
	}
	checkTally(t, s, "q")
	st, err := s.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.Depth["done"] != 2 || st.Depth["dead"] != 2 || st.Depth["cancelled"] != 5 || st.DLQDepth != 2 {
		t.Errorf("stats after the moves: %+v", st)
	}
	got, attempts, err := s.GetTask(ctx, "q", acked.ID)
	if err != nil || got.Status != storage.StatusDone || string(got.Result) != `{"ok": 1}` ||
		len(attempts) != 1 || attempts[0].Status != storage.AttemptSucceeded {
		t.Errorf("GET of the acked task: %+v %+v %v", got, attempts, err)
	}
}

// TestWorkflowMovesIntoHistory: a workflow whose steps finish one by one (a step
// acked, a step dying, the cascade cancelling the rest) keeps every step readable,
// resumes from history, and ends succeeded with every task in history.
func TestWorkflowMovesIntoHistory(t *testing.T) {
	s := workflowStore(t, "q")
	ctx := context.Background()
	w := submit(t, s, step("a", "q"), step("b", "q", "a"), step("c", "q", "b"), step("d", "q", "b"))
	a := claimAll(t, s, "q", "w")
	ack(t, s, a[0])
	wantInHistory(t, s, "done", 1, a[0].ID)
	b := claimAll(t, s, "q", "w")
	if _, err := s.Nack(ctx, storage.Nack{TaskID: b[0].ID, LeaseToken: *b[0].LeaseToken, WorkerID: "w", Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "failed", "a": "done", "b": "dead", "c": "cancelled", "d": "cancelled"})
	wantInHistory(t, s, "dead", 1, b[0].ID)
	replayed, err := s.Replay(ctx, "q", []uuid.UUID{b[0].ID}, false)
	if err != nil || len(replayed) != 1 {
		t.Fatalf("replay: %+v %v", replayed, err)
	}
	for round := 0; round < 2; round++ {
		for _, x := range claimAll(t, s, "q", "w") {
			if *x.Step == "a" {
				t.Fatal("done step a ran again")
			}
			ack(t, s, x)
		}
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "succeeded", "a": "done", "b": "done", "c": "done", "d": "done"})
	var live int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM tasks`).Scan(&live); err != nil || live != 0 {
		t.Errorf("tasks left in tasks: %d (%v)", live, err)
	}
	checkTally(t, s, "q")

	// A cancelled workflow: its waiting steps move at once.
	w2 := submit(t, s, step("x", "q"), step("y", "q", "x"))
	if _, _, err := s.CancelWorkflow(ctx, w2.ID); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, s, w2.ID, map[string]string{"workflow": "cancelled", "x": "cancelled", "y": "cancelled"})
	wf, err := s.GetWorkflow(ctx, w2.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range wf.Steps {
		wantInHistory(t, s, "cancelled", 0, st.TaskID)
	}
	checkTally(t, s, "q")
}
