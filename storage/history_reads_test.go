package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// Reads and the actions on finished tasks see history (task_history,
// attempt_history) as well as tasks: these tests finish tasks, move them into
// history with the backfill's batch (move_finished_batch), and use them there.

// moveAllToHistory moves every finished task of s that is not there yet into
// history (the transitions move them as they finish, migration 0023) and fails
// unless history then holds want tasks.
func moveAllToHistory(t *testing.T, s *storage.Store, want int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.EnsureHistoryPartitionsSince(ctx, time.Now().AddDate(0, 0, -1), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MoveFinishedBatch(ctx, 0, 1<<20, time.Minute); err != nil {
		t.Fatal(err)
	}
	var left, moved int64
	if err := s.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM tasks WHERE status IN ('done', 'cancelled', 'dead')),
		(SELECT count(*) FROM task_history)`).Scan(&left, &moved); err != nil || left != 0 || moved != want {
		t.Fatalf("finished tasks left in tasks: %d, in history: %d, want %d (%v)", left, moved, want, err)
	}
}

func historyRows(t *testing.T, s *storage.Store, id uuid.UUID) (tasks, attempts int) {
	t.Helper()
	err := s.Pool().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM task_history WHERE id = $1),
		(SELECT count(*) FROM attempt_history WHERE task_id = $1)`, id).Scan(&tasks, &attempts)
	if err != nil {
		t.Fatal(err)
	}
	return tasks, attempts
}

func TestReadsAndActionsFindHistory(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	nts := newTasks(8)
	if _, err := s.Enqueue(ctx, "q", nts, nil); err != nil {
		t.Fatal(err)
	}
	ids := dispatchAll(t, s)
	claimed, err := testenv.Claim(ctx, s, ids[:5], "w", time.Minute)
	if err != nil || len(claimed) != 5 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	byID := map[uuid.UUID]storage.Task{}
	for _, c := range claimed {
		byID[c.ID] = c
	}
	done := []uuid.UUID{claimed[0].ID, claimed[1].ID}
	dead := []uuid.UUID{claimed[2].ID, claimed[3].ID, claimed[4].ID}
	for _, id := range done {
		c := byID[id]
		if _, err := s.Ack(ctx, *c.ClaimedBy, id, *c.LeaseToken, json.RawMessage(`{"ok":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range dead {
		c := byID[id]
		if _, err := s.Nack(ctx, storage.Nack{TaskID: id, LeaseToken: *c.LeaseToken, WorkerID: *c.ClaimedBy, Error: "boom"}); err != nil {
			t.Fatal(err)
		}
	}
	var waiting []uuid.UUID
	for _, id := range ids {
		if _, ok := byID[id]; !ok {
			waiting = append(waiting, id)
		}
	}
	cancelled := waiting[0]
	if _, err := s.CancelTask(ctx, "q", cancelled); err != nil {
		t.Fatal(err)
	}
	before, err := s.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	moveAllToHistory(t, s, 6)
	checkTally(t, s, "q")
	after, err := s.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if !mapsEqual(before.Depth, after.Depth) || before.DLQDepth != after.DLQDepth || after.DLQDepth != 3 {
		t.Errorf("stats before the move %+v, after %+v", before, after)
	}

	// GET: a finished task with its attempts, from history.
	got, attempts, err := s.GetTask(ctx, "q", done[0])
	if err != nil || got.Status != storage.StatusDone || string(got.Result) != `{"ok": 1}` {
		t.Fatalf("get done task from history: %+v %v", got, err)
	}
	if len(attempts) != 1 || attempts[0].Status != storage.AttemptSucceeded {
		t.Errorf("attempts from history: %+v", attempts)
	}
	if n, a := historyRows(t, s, done[0]); n != 1 || a != 1 {
		t.Fatalf("done task not in history: %d rows, %d attempts", n, a)
	}
	if _, _, err := s.GetTask(ctx, "other", done[0]); err == nil {
		t.Error("GET of a history task under another queue found it")
	}

	// Cancel of a finished task in history: not cancellable (not "not found").
	if _, err := s.CancelTask(ctx, "q", done[1]); !errors.Is(err, storage.ErrTaskNotCancellable) {
		t.Errorf("cancel of a done task in history: %v, want ErrTaskNotCancellable", err)
	}

	// Lists: pages of 3 across both tables, newest first, every task once.
	var listed []uuid.UUID
	var cursor *storage.Cursor
	for page := 0; ; page++ {
		tasks, next, err := s.ListTasks(ctx, storage.TaskFilter{Queue: "q", Limit: 3, After: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range tasks {
			listed = append(listed, x.ID)
		}
		if next == nil {
			break
		}
		cursor = next
		if page > 10 {
			t.Fatal("list does not end")
		}
	}
	want := slices.Clone(ids)
	slices.SortFunc(want, func(a, b uuid.UUID) int { return -compareCreated(t, s, a, b) })
	if !slices.Equal(listed, want) {
		t.Errorf("listed %v, want %v", listed, want)
	}
	doneList, _, err := s.ListTasks(ctx, storage.TaskFilter{Queue: "q", Status: storage.StatusDone, Limit: 10})
	if err != nil || len(doneList) != 2 {
		t.Errorf("list of done tasks: %d %v", len(doneList), err)
	}

	// DLQ: pages across history.
	var dlq []uuid.UUID
	cursor = nil
	for {
		tasks, next, err := s.ListDead(ctx, "q", 2, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range tasks {
			dlq = append(dlq, x.ID)
		}
		if next == nil {
			break
		}
		cursor = next
	}
	if len(dlq) != 3 || !sameSet(dlq, dead) {
		t.Errorf("DLQ %v, want %v", dlq, dead)
	}

	// Queue deletion refuses while history holds dead tasks.
	if err := s.DeleteQueue(ctx, "q"); !errors.Is(err, storage.ErrQueueNotEmpty) {
		t.Errorf("delete queue with dead tasks in history: %v, want ErrQueueNotEmpty", err)
	}

	// Replay: a new task; the dead one, in history, gains replay_count.
	replayed, err := s.Replay(ctx, "q", []uuid.UUID{dead[0]}, false)
	if err != nil || len(replayed) != 1 || *replayed[0].ReplayedFrom != dead[0] || replayed[0].Status != storage.StatusPending {
		t.Fatalf("replay from history: %+v %v", replayed, err)
	}
	src, _, err := s.GetTask(ctx, "q", dead[0])
	if err != nil || src.ReplayCount != 1 || src.ReplayedAt == nil || src.Status != storage.StatusDead {
		t.Errorf("replayed dead task: %+v %v", src, err)
	}
	if _, err := s.Replay(ctx, "q", []uuid.UUID{done[0]}, false); !errors.Is(err, storage.ErrTaskNotFound) {
		t.Errorf("replay of a done task: %v, want ErrTaskNotFound", err)
	}

	// Discard: the dead task and its attempts leave history.
	if err := s.DiscardDead(ctx, "q", dead[1]); err != nil {
		t.Fatal(err)
	}
	if n, a := historyRows(t, s, dead[1]); n != 0 || a != 0 {
		t.Errorf("discarded task still in history: %d rows, %d attempts", n, a)
	}
	if _, _, err := s.GetTask(ctx, "q", dead[1]); !errors.Is(err, storage.ErrTaskNotFound) {
		t.Errorf("GET of a discarded task: %v", err)
	}
	if err := s.DiscardDead(ctx, "q", done[0]); !errors.Is(err, storage.ErrTaskNotFound) {
		t.Errorf("discard of a done task: %v, want ErrTaskNotFound", err)
	}
	checkTally(t, s, "q")

	// Bulk discard: the rest of the DLQ, from history.
	n, err := s.DiscardDeadMany(ctx, "q", nil, true, 1, nil)
	if err != nil || n != 2 {
		t.Fatalf("bulk discard from history: %d %v", n, err)
	}
	for _, id := range []uuid.UUID{dead[0], dead[2]} {
		if n, a := historyRows(t, s, id); n != 0 || a != 0 {
			t.Errorf("bulk-discarded task %s still in history: %d rows, %d attempts", id, n, a)
		}
	}
	checkTally(t, s, "q")

	// Queue deletion: no dead task left; the done and cancelled ones in history go
	// with the queue (once its live tasks are finished).
	if _, err := s.CancelTasks(ctx, "q", append(waiting[1:], replayed[0].ID)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	var left int64
	if err := s.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM task_history) + (SELECT count(*) FROM attempt_history)
		+ (SELECT count(*) FROM tasks)`).Scan(&left); err != nil || left != 0 {
		t.Errorf("rows left after the queue's deletion: %d (%v)", left, err)
	}
}

// TestWorkflowReadsHistory: a failed workflow whose steps are in history reads
// whole, and replaying its dead step (in history) resumes it.
func TestWorkflowReadsHistory(t *testing.T) {
	s := workflowStore(t, "q")
	ctx := context.Background()
	w := submit(t, s, step("a", "q"), step("b", "q", "a"), step("c", "q", "b"))
	a := claimAll(t, s, "q", "w")
	ack(t, s, a[0])
	b := claimAll(t, s, "q", "w")
	if _, err := s.Nack(ctx, storage.Nack{TaskID: b[0].ID, LeaseToken: *b[0].LeaseToken, WorkerID: "w", Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	moveAllToHistory(t, s, 3) // a done, b dead, c cancelled
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "failed", "a": "done", "b": "dead", "c": "cancelled"})
	replayed, err := s.Replay(ctx, "q", []uuid.UUID{b[0].ID}, false)
	if err != nil || len(replayed) != 1 || *replayed[0].Step != "b" {
		t.Fatalf("replay of a workflow's dead step in history: %+v %v", replayed, err)
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "running", "a": "done", "b": "pending", "c": "blocked"})
	src, _, err := s.GetTask(ctx, "q", b[0].ID)
	if err != nil || src.ReplayCount != 1 {
		t.Errorf("the dead step in history: replay_count %d (%v), want 1", src.ReplayCount, err)
	}
	for round := 0; round < 2; round++ {
		for _, x := range claimAll(t, s, "q", "w") {
			if *x.Step == "a" {
				t.Fatal("done step a ran again")
			}
			ack(t, s, x)
		}
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "succeeded", "a": "done", "b": "done", "c": "done"})
	checkTally(t, s, "q")
}

func compareCreated(t *testing.T, s *storage.Store, a, b uuid.UUID) int {
	t.Helper()
	ta, _, err := s.GetTask(context.Background(), "q", a)
	if err != nil {
		t.Fatal(err)
	}
	tb, _, err := s.GetTask(context.Background(), "q", b)
	if err != nil {
		t.Fatal(err)
	}
	if c := ta.CreatedAt.Compare(tb.CreatedAt); c != 0 {
		return c
	}
	return slices.Compare(a[:], b[:])
}

func sameSet(a, b []uuid.UUID) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.SortFunc(x, func(p, q uuid.UUID) int { return slices.Compare(p[:], q[:]) })
	slices.SortFunc(y, func(p, q uuid.UUID) int { return slices.Compare(p[:], q[:]) })
	return slices.Equal(x, y)
}

func mapsEqual(a, b map[string]int64) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}
