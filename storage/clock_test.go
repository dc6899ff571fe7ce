package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// The helpers of the transition tests: a store on its own database whose lease and
// due-time statements run on a clock the test sets (storage.WithClock), so that a
// lease expires or a retry falls due when the test says, never after a sleep
// (testenv.Clock).

// t0 is where every test clock starts. Tasks are enqueued due a second earlier.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	worker = "w1"
	lease  = 30 * time.Second
	// backoff is the queue's retry delay: base and max alike, so that the random
	// part of the backoff (up to base) is always capped back to exactly this.
	backoff = time.Second
)

// rig is one case's store, with its clock at t0, on its test's database (caseDB),
// which holds one queue "q" (retry delay exactly backoff) and no task but the case's.
type rig struct {
	t     *testing.T
	s     *storage.Store
	clock *testenv.Clock
}

// caseDB returns a database for the cases of one test, which run one after the
// other: each deletes its tasks when it ends, so that the next one's reclaim and
// dispatch see only its own.
func caseDB(t *testing.T) *storage.Store {
	t.Helper()
	s := testenv.NewStore(t)
	if _, err := s.CreateQueue(context.Background(), storage.Queue{Name: "q", MaxRetries: 3,
		BackoffBaseMs: backoff.Milliseconds(), BackoffMaxMs: backoff.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	return s
}

// newRig starts a case on db (from caseDB).
func newRig(t *testing.T, db *storage.Store) *rig {
	t.Helper()
	c := &testenv.Clock{}
	c.Set(t0)
	t.Cleanup(func() {
		if _, err := db.Pool().Exec(context.Background(), `DELETE FROM tasks`); err != nil {
			t.Errorf("delete the case's tasks: %v", err)
		}
	})
	return &rig{t: t, s: testenv.Clocked(db, c), clock: c}
}

// enqueue adds a task due at t0 - 1s with the given budget and timeout (0: none).
func (r *rig) enqueue(maxRetries, timeoutSeconds int) uuid.UUID {
	r.t.Helper()
	due := t0.Add(-time.Second)
	nt := storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{}`), Priority: 5,
		ScheduledAt: &due, MaxRetries: &maxRetries}
	if timeoutSeconds > 0 {
		nt.TimeoutSeconds = &timeoutSeconds
	}
	if _, err := r.s.Enqueue(context.Background(), "q", []storage.NewTask{nt}, nil); err != nil {
		r.t.Fatal(err)
	}
	return nt.ID
}

// claim dispatches the due tasks of q at the clock's time and claims id for
// worker, failing unless it gets id's new lease.
func (r *rig) claim(id uuid.UUID) storage.Task {
	r.t.Helper()
	ctx := context.Background()
	if _, err := r.s.DispatchDue(ctx, "q", 100, 1<<40); err != nil {
		r.t.Fatal(err)
	}
	claimed, err := testenv.Claim(ctx, r.s, []uuid.UUID{id}, worker, lease)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(claimed) != 1 {
		r.t.Fatalf("claim %s at %s: got %d tasks, want 1", id, r.clock.Now(), len(claimed))
	}
	return claimed[0]
}

// start enqueues a task and claims it: its first attempt, executing.
func (r *rig) start(maxRetries, timeoutSeconds int) storage.Task {
	r.t.Helper()
	return r.claim(r.enqueue(maxRetries, timeoutSeconds))
}

// get reads a task and its attempts.
func (r *rig) get(id uuid.UUID) (storage.Task, []storage.Attempt) {
	r.t.Helper()
	task, attempts, err := r.s.GetTask(context.Background(), "q", id)
	if err != nil {
		r.t.Fatal(err)
	}
	return task, attempts
}

// reclaim runs the watchdog's statement at the clock's time.
func (r *rig) reclaim() []storage.Reclaimed {
	r.t.Helper()
	out, err := r.s.ReclaimExpired(context.Background(), 100)
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// staleLease makes the lease of task stale: the clock passes its expiry, the
// watchdog reclaims it, the retry falls due, and the task is claimed again. It
// returns the second attempt; the clock is where that claim happened.
func (r *rig) staleLease(task storage.Task) storage.Task {
	r.t.Helper()
	r.clock.Set(task.LeaseExpiresAt.Add(time.Millisecond))
	if got := r.reclaim(); len(got) != 1 || got[0].Status != storage.StatusRetry {
		r.t.Fatalf("reclaim: %+v, want the task in retry", got)
	}
	r.clock.Advance(backoff)
	again := r.claim(task.ID)
	if *again.LeaseToken == *task.LeaseToken {
		r.t.Fatal("a new claim kept the old lease token")
	}
	return again
}

// requestCancel asks for task's cancel (it is executing: it gets cancel_requested).
func (r *rig) requestCancel(id uuid.UUID) {
	r.t.Helper()
	c, err := r.s.CancelTask(context.Background(), "q", id)
	if err != nil {
		r.t.Fatal(err)
	}
	if c.Status != storage.StatusExecuting || !c.CancelRequested {
		r.t.Fatalf("cancel of an executing task: status %s, cancel_requested %v", c.Status, c.CancelRequested)
	}
}

// unchanged fails unless task id still is exactly as before: same status, attempt
// count, releases, lease and attempt history.
func (r *rig) unchanged(before storage.Task, beforeAttempts []storage.Attempt) {
	r.t.Helper()
	now, attempts := r.get(before.ID)
	if now.Status != before.Status || now.Attempts != before.Attempts || now.Releases != before.Releases ||
		!eqPtr(now.LeaseToken, before.LeaseToken) || !eqTime(now.LeaseExpiresAt, before.LeaseExpiresAt) ||
		!now.ScheduledAt.Equal(before.ScheduledAt) || !now.UpdatedAt.Equal(before.UpdatedAt) {
		r.t.Errorf("task changed:\n before %s\n now    %s", describe(before), describe(now))
	}
	if len(attempts) != len(beforeAttempts) {
		r.t.Fatalf("%d attempts, want %d", len(attempts), len(beforeAttempts))
	}
	for i := range attempts {
		if attempts[i].Status != beforeAttempts[i].Status || !eqTime(attempts[i].FinishedAt, beforeAttempts[i].FinishedAt) {
			r.t.Errorf("attempt %d changed: %+v, was %+v", i+1, attempts[i], beforeAttempts[i])
		}
	}
}

func describe(t storage.Task) string {
	b, _ := json.Marshal(struct {
		Status, Token     string
		Attempts, Release int
		Scheduled, Lease  any
	}{t.Status, tokenOf(t), t.Attempts, t.Releases, t.ScheduledAt, t.LeaseExpiresAt})
	return string(b)
}

func tokenOf(t storage.Task) string {
	if t.LeaseToken == nil {
		return ""
	}
	return t.LeaseToken.String()
}

func eqPtr[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func eqTime(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }

// wantTime fails unless got is exactly want.
func wantTime(t *testing.T, what string, got *time.Time, want time.Time) {
	t.Helper()
	if got == nil || !got.Equal(want) {
		t.Errorf("%s = %v, want %s", what, got, want)
	}
}

// wantLeaseLost fails unless err is storage.ErrLeaseLost.
func wantLeaseLost(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("err = %v, want ErrLeaseLost", err)
	}
}
