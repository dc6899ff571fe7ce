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

// Migration 0033: the claim writes no attempt row; the attempt an executing task is
// in is its task row's, and each statement that ends an attempt writes the ended row
// (or ends in place the 'executing' row a replica of the previous release wrote at its
// claim) and counts its outcome once.

// outcomes returns queue's attempt outcomes as the tally kept them (folded totals and
// deltas not folded yet), by metric ("attempt:failed" ...).
func outcomes(t *testing.T, s *storage.Store, queue string) map[string]int64 {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `SELECT metric, sum(n)::int8 FROM (
			SELECT metric, n FROM queue_tally WHERE queue = $1
			UNION ALL
			SELECT metric, delta FROM queue_tally_delta WHERE queue = $1) c
		WHERE metric LIKE 'attempt:%' GROUP BY metric HAVING sum(n) <> 0`, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var metric string
		var n int64
		if err := rows.Scan(&metric, &n); err != nil {
			t.Fatal(err)
		}
		out[metric] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantOutcomes fails unless queue's tally holds exactly want.
func wantOutcomes(t *testing.T, s *storage.Store, queue string, want map[string]int64) {
	t.Helper()
	got := outcomes(t, s, queue)
	if len(got) != len(want) {
		t.Errorf("attempt outcomes counted %v, want %v", got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attempt outcomes counted %v, want %v", got, want)
			return
		}
	}
}

// claimOne enqueues one task into queue "q" of s, dispatches and claims it for "w".
func claimOne(t *testing.T, s *storage.Store) storage.Task {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Enqueue(ctx, "q", newTasks(1), nil); err != nil {
		t.Fatal(err)
	}
	return claimDue(t, s)
}

// claimDue dispatches queue "q"'s one due task and claims it for "w".
func claimDue(t *testing.T, s *storage.Store) storage.Task {
	t.Helper()
	ids := dispatchAll(t, s)
	if len(ids) != 1 {
		t.Fatalf("dispatched %d tasks, want 1", len(ids))
	}
	claimed, err := testenv.Claim(context.Background(), s, ids, "w", time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %d of 1: %v", len(claimed), err)
	}
	return claimed[0]
}

// writeOldClaimRow inserts the 'executing' attempt row that a claim of the release
// before 0033 wrote, for task's current attempt.
func writeOldClaimRow(t *testing.T, s *storage.Store, task storage.Task) {
	t.Helper()
	if _, err := s.Pool().Exec(context.Background(), `INSERT INTO attempts (task_id, attempt, queue, worker_id,
			lease_token, status, started_at)
		SELECT id, attempts, queue, claimed_by, lease_token, 'executing', attempt_started_at FROM tasks WHERE id = $1`,
		task.ID); err != nil {
		t.Fatal(err)
	}
}

// attemptRows counts task's rows in attempts and in attempt_history.
func attemptRows(t *testing.T, s *storage.Store, id uuid.UUID) (live, old int) {
	t.Helper()
	if err := s.Pool().QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM attempts WHERE task_id = $1), (SELECT count(*) FROM attempt_history WHERE task_id = $1)`,
		id).Scan(&live, &old); err != nil {
		t.Fatal(err)
	}
	return live, old
}

// wantAttempts fails unless task id's attempts read back (Store.Attempts, as GET of
// a task lists them) are, in order, of the statuses given, numbered from 1, each
// ended one with its finish no earlier than its start.
func wantAttempts(t *testing.T, s *storage.Store, id uuid.UUID, statuses ...string) []storage.Attempt {
	t.Helper()
	got, err := s.Attempts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	ok := len(got) == len(statuses)
	for i := 0; ok && i < len(got); i++ {
		a := got[i]
		ok = a.Attempt == i+1 && a.Status == statuses[i] && a.WorkerID == "w" && !a.StartedAt.IsZero() &&
			(a.Status == "executing") == (a.FinishedAt == nil) && (a.FinishedAt == nil || !a.FinishedAt.Before(a.StartedAt))
	}
	if !ok {
		t.Errorf("attempts of %s: %+v, want statuses %v", id, got, statuses)
	}
	return got
}

// TestExecutingAttemptIsReadFromTheTask: a claim writes no attempt row, yet the
// task's attempts list its current attempt, executing, as the task row has it.
func TestExecutingAttemptIsReadFromTheTask(t *testing.T) {
	s := newStore(t)
	task := claimOne(t, s)
	if live, old := attemptRows(t, s, task.ID); live != 0 || old != 0 {
		t.Errorf("the claim wrote %d attempt rows and %d in history, want none", live, old)
	}
	got := wantAttempts(t, s, task.ID, "executing")
	if len(got) == 1 && !got[0].StartedAt.Equal(*task.AttemptStartedAt) {
		t.Errorf("the current attempt started at %v, the task's at %v", got[0].StartedAt, *task.AttemptStartedAt)
	}
	// A row of the previous release's claim describes it instead: listed once.
	writeOldClaimRow(t, s, task)
	wantAttempts(t, s, task.ID, "executing")
	wantOutcomes(t, s, "q", map[string]int64{})
}

// onEachPool runs test on a store with a hot pool, as serve has, and on one without;
// the store's clock starts a minute after the enqueues' own now() and moves only by
// advance.
func onEachPool(t *testing.T, test func(t *testing.T, s *storage.Store, advance func(time.Duration))) {
	for _, hot := range []bool{true, false} {
		t.Run(map[bool]string{true: "hot pool", false: "main pool only"}[hot], func(t *testing.T) {
			base := newStore(t)
			now := time.Now().Add(time.Minute)
			clock := func() time.Time { return now }
			opts := []storage.Option{storage.WithClock(clock)}
			if hot {
				opts = append(opts, storage.WithHotPool(base.HotPool()))
			}
			test(t, storage.New(base.Pool(), opts...), func(d time.Duration) { now = now.Add(d) })
		})
	}
}

// TestEndedAttemptsAreWrittenAndCountedOnce: each way an attempt ends (nack, release,
// reclaim, cancel then nack, ack) writes one row of it, in order, and counts its
// outcome once, on a store with a hot pool as serve has and on one without.
func TestEndedAttemptsAreWrittenAndCountedOnce(t *testing.T) {
	onEachPool(t, func(t *testing.T, s *storage.Store, advance func(time.Duration)) {
		ctx := context.Background()
		retryNow := int64(0)

		task := claimOne(t, s)
		if _, err := s.Nack(ctx, storage.Nack{TaskID: task.ID, LeaseToken: *task.LeaseToken, WorkerID: "w",
			Error: "boom", Retryable: true, RetryAfterMs: &retryNow}); err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, s, task.ID, "failed")
		wantOutcomes(t, s, "q", map[string]int64{"attempt:failed": 1})

		advance(time.Second)
		task = claimDue(t, s)
		if _, err := s.Release(ctx, storage.Release{TaskID: task.ID, LeaseToken: *task.LeaseToken, WorkerID: "w",
			Reason: "stopping"}); err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, s, task.ID, "failed", "released")
		wantOutcomes(t, s, "q", map[string]int64{"attempt:failed": 1, "attempt:released": 1})

		task = claimDue(t, s)
		advance(2 * time.Minute) // past the lease
		if r, err := s.ReclaimExpired(ctx, 10); err != nil || len(r) != 1 {
			t.Fatalf("reclaimed %d of 1: %v", len(r), err)
		}
		wantAttempts(t, s, task.ID, "failed", "released", "abandoned")
		wantOutcomes(t, s, "q", map[string]int64{"attempt:failed": 1, "attempt:released": 1, "attempt:abandoned": 1})

		advance(time.Hour) // past the backoff
		task = claimDue(t, s)
		wantAttempts(t, s, task.ID, "failed", "released", "abandoned", "executing")
		if _, err := s.Ack(ctx, "w", task.ID, *task.LeaseToken, json.RawMessage(`1`)); err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, s, task.ID, "failed", "released", "abandoned", "succeeded")
		if live, old := attemptRows(t, s, task.ID); live != 0 || old != 4 {
			t.Errorf("after the ack: %d attempt rows live, %d in history, want 0 and 4", live, old)
		}
		want := map[string]int64{"attempt:failed": 1, "attempt:released": 1, "attempt:abandoned": 1, "attempt:succeeded": 1}
		wantOutcomes(t, s, "q", want)

		// A cancel of an executing task ends nothing until its worker's nack.
		task = claimOne(t, s)
		if _, err := s.CancelTask(ctx, "q", task.ID); err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, s, task.ID, "executing")
		if _, err := s.Nack(ctx, storage.Nack{TaskID: task.ID, LeaseToken: *task.LeaseToken, WorkerID: "w",
			Error: "cancelled", Retryable: true}); err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, s, task.ID, "cancelled")
		if live, old := attemptRows(t, s, task.ID); live != 0 || old != 1 {
			t.Errorf("after the cancel: %d attempt rows live, %d in history, want 0 and 1", live, old)
		}
		want["attempt:cancelled"] = 1
		wantOutcomes(t, s, "q", want)
		if drift, err := s.TallyDrift(ctx, "q"); err != nil || len(drift) > 0 {
			t.Errorf("counts drift from count(*): %v %v", drift, err)
		}
	})
}

// TestPreviousReleaseClaimRowEndedOnce: an attempt whose claim (by a replica of the
// previous release) wrote an 'executing' row is ended in that row, by a nack, a
// reclaim and an ack alike: one row per attempt, each outcome counted once, on a
// store with a hot pool and on one without.
func TestPreviousReleaseClaimRowEndedOnce(t *testing.T) {
	onEachPool(t, func(t *testing.T, s *storage.Store, advance func(time.Duration)) {
		ctx := context.Background()
		retryNow := int64(0)

		task := claimOne(t, s)
		writeOldClaimRow(t, s, task)
		if _, err := s.Nack(ctx, storage.Nack{TaskID: task.ID, LeaseToken: *task.LeaseToken, WorkerID: "w",
			Error: "boom", Retryable: true, RetryAfterMs: &retryNow}); err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, s, task.ID, "failed")
		wantOutcomes(t, s, "q", map[string]int64{"attempt:failed": 1})

		advance(time.Second)
		task = claimDue(t, s)
		writeOldClaimRow(t, s, task)
		advance(2 * time.Minute)
		if r, err := s.ReclaimExpired(ctx, 10); err != nil || len(r) != 1 {
			t.Fatalf("reclaimed %d of 1: %v", len(r), err)
		}
		wantAttempts(t, s, task.ID, "failed", "abandoned")
		wantOutcomes(t, s, "q", map[string]int64{"attempt:failed": 1, "attempt:abandoned": 1})

		advance(time.Hour)
		task = claimDue(t, s)
		writeOldClaimRow(t, s, task)
		if _, err := s.Ack(ctx, "w", task.ID, *task.LeaseToken, json.RawMessage(`1`)); err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, s, task.ID, "failed", "abandoned", "succeeded")
		if live, old := attemptRows(t, s, task.ID); live != 0 || old != 3 {
			t.Errorf("after the ack: %d attempt rows live, %d in history, want 0 and 3", live, old)
		}
		wantOutcomes(t, s, "q", map[string]int64{"attempt:failed": 1, "attempt:abandoned": 1, "attempt:succeeded": 1})

		// The ack by reference (a poll's) too.
		task = claimOne(t, s)
		writeOldClaimRow(t, s, task)
		item := storage.AckItem{TaskID: task.ID, LeaseToken: *task.LeaseToken, WorkerID: "w"}
		if acked, err := s.AckMany(ctx, []storage.AckItem{item}, true); err != nil || len(acked) != 1 {
			t.Fatalf("acked %d of 1 by its ref: %v", len(acked), err)
		}
		wantAttempts(t, s, task.ID, "succeeded")
		wantOutcomes(t, s, "q", map[string]int64{"attempt:failed": 1, "attempt:abandoned": 1, "attempt:succeeded": 2})
	})
}

// leftoverWithAttempt leaves one task of queue "q" finished with status in tasks (as
// a release before migration 0023 left them) with an ended attempt in attempts, and
// returns it.
func leftoverWithAttempt(t *testing.T, s *storage.Store, status string) storage.Task {
	t.Helper()
	ctx := context.Background()
	task := claimOne(t, s)
	if _, err := s.Nack(ctx, storage.Nack{TaskID: task.ID, LeaseToken: *task.LeaseToken, WorkerID: "w",
		Error: "boom", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`ALTER TABLE tasks DISABLE TRIGGER tasks_move_finished`,
		`UPDATE tasks SET status = '` + status + `', finished_at = now() - interval '30 days',
			created_at = now() - interval '31 days' WHERE id = '` + task.ID.String() + `'`,
		`ALTER TABLE tasks ENABLE TRIGGER tasks_move_finished`,
	} {
		if _, err := s.Pool().Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if live, _ := attemptRows(t, s, task.ID); live != 1 {
		t.Fatalf("the leftover task has %d attempt rows, want 1", live)
	}
	return task
}

// wantNoOrphanAttempts fails if attempts holds a row of no task.
func wantNoOrphanAttempts(t *testing.T, s *storage.Store, after string) {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM attempts a
		WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = a.task_id)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("after %s: %d attempt rows of no task", after, n)
	}
}

// TestDeletedTasksTakeTheirAttempts: without the foreign key's cascade (migration
// 0033), each statement that deletes tasks deletes their attempts: a queue's
// deletion, retention, a discard (one and many), a workflow's deletion.
func TestDeletedTasksTakeTheirAttempts(t *testing.T) {
	ctx := context.Background()
	t.Run("queue", func(t *testing.T) {
		s := newStore(t)
		leftoverWithAttempt(t, s, "done")
		if err := s.DeleteQueue(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		wantNoOrphanAttempts(t, s, "deleting the queue")
	})
	t.Run("retention", func(t *testing.T) {
		s := newStore(t)
		leftoverWithAttempt(t, s, "done")
		if n, err := s.DeleteExpiredTasks(ctx, storage.DefaultRetention(time.Hour), 100, time.Second); err != nil || n != 1 {
			t.Fatalf("retention deleted %d of 1: %v", n, err)
		}
		wantNoOrphanAttempts(t, s, "retention")
	})
	t.Run("discard", func(t *testing.T) {
		s := newStore(t)
		task := leftoverWithAttempt(t, s, "dead")
		if err := s.DiscardDead(ctx, "q", task.ID); err != nil {
			t.Fatal(err)
		}
		wantNoOrphanAttempts(t, s, "a discard")
	})
	t.Run("discard many", func(t *testing.T) {
		s := newStore(t)
		task := leftoverWithAttempt(t, s, "dead")
		if n, err := s.DiscardDeadMany(ctx, "q", []uuid.UUID{task.ID}, false, 10, nil); err != nil || n != 1 {
			t.Fatalf("discarded %d of 1: %v", n, err)
		}
		wantNoOrphanAttempts(t, s, "a bulk discard")
	})
	t.Run("workflow", func(t *testing.T) {
		s := newStore(t)
		w := submit(t, s, step("a", "q"))
		task := claimAll(t, s, "q", "w")[0]
		if _, err := s.Nack(ctx, storage.Nack{TaskID: task.ID, LeaseToken: *task.LeaseToken, WorkerID: "w",
			Error: "boom", Retryable: true}); err != nil {
			t.Fatal(err)
		}
		// Its task left finished in tasks, as before migration 0023, with its attempt.
		for _, stmt := range []string{
			`ALTER TABLE tasks DISABLE TRIGGER tasks_move_finished`,
			`UPDATE tasks SET status = 'cancelled', finished_at = now() - interval '30 days' WHERE id = '` + task.ID.String() + `'`,
			`ALTER TABLE tasks ENABLE TRIGGER tasks_move_finished`,
			`UPDATE workflows SET status = 'cancelled', finished_at = now() - interval '30 days' WHERE id = '` + w.ID.String() + `'`,
		} {
			if _, err := s.Pool().Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		if live, _ := attemptRows(t, s, task.ID); live != 1 {
			t.Fatalf("the step's task has %d attempt rows, want 1", live)
		}
		if n, err := s.DeleteExpiredWorkflows(ctx, storage.DefaultRetention(time.Hour), 10, time.Second); err != nil || n != 1 {
			t.Fatalf("deleted %d workflows of 1: %v", n, err)
		}
		wantNoOrphanAttempts(t, s, "a workflow's deletion")
	})
}
