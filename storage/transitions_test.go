package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// Table-driven tests of each transition of an executing task, against PostgreSQL,
// on a clock the test sets (see clock_test.go): each case starts from a fresh
// database with one task in its first attempt, claimed at t0 with a 30 s lease.

func ptr[T any](v T) *T { return &v }

// TestAckTransitions: an ack counts only under the task's current, unexpired lease,
// held by the worker that claimed it; a rejected ack changes nothing.
func TestAckTransitions(t *testing.T) {
	t.Parallel()
	db := caseDB(t)
	for _, tc := range []struct {
		name string
		// prepare moves the clock or the task and returns the ack to send.
		prepare func(r *rig, task storage.Task) storage.AckItem
		done    bool
	}{
		{"valid token", func(r *rig, task storage.Task) storage.AckItem {
			r.clock.Advance(10 * time.Second)
			return ackOf(task)
		}, true},
		{"just before expiry", func(r *rig, task storage.Task) storage.AckItem {
			r.clock.Set(task.LeaseExpiresAt.Add(-time.Microsecond))
			return ackOf(task)
		}, true},
		{"at expiry", func(r *rig, task storage.Task) storage.AckItem {
			r.clock.Set(*task.LeaseExpiresAt)
			return ackOf(task)
		}, false},
		{"expired lease", func(r *rig, task storage.Task) storage.AckItem {
			r.clock.Set(task.LeaseExpiresAt.Add(time.Second))
			return ackOf(task)
		}, false},
		{"other worker", func(r *rig, task storage.Task) storage.AckItem {
			a := ackOf(task)
			a.WorkerID = "w2"
			return a
		}, false},
		{"unknown token", func(r *rig, task storage.Task) storage.AckItem {
			a := ackOf(task)
			a.LeaseToken = uuid.New()
			return a
		}, false},
		{"stale token after a reclaim and a new claim", func(r *rig, task storage.Task) storage.AckItem {
			r.staleLease(task)
			return ackOf(task)
		}, false},
		// A cancel request asks the worker to stop; a worker that finished anyway
		// has done the work, and its ack stands.
		{"cancel requested", func(r *rig, task storage.Task) storage.AckItem {
			r.requestCancel(task.ID)
			return ackOf(task)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, db)
			task := r.start(3, 0)
			item := tc.prepare(r, task)
			before, beforeAttempts := r.get(task.ID)

			got, err := r.s.Ack(context.Background(), item.WorkerID, item.TaskID, item.LeaseToken, item.Result)
			if !tc.done {
				wantLeaseLost(t, err)
				r.unchanged(before, beforeAttempts)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			now := r.clock.Now()
			after, attempts := r.get(task.ID)
			if after.Status != storage.StatusDone || got.Status != storage.StatusDone {
				t.Errorf("status %s (returned %s), want done", after.Status, got.Status)
			}
			if string(after.Result) != `{"n": 1}` {
				t.Errorf("result %s", after.Result)
			}
			wantTime(t, "finished_at", after.FinishedAt, now)
			if !after.UpdatedAt.Equal(now) || after.LeaseExpiresAt != nil || after.Attempts != 1 {
				t.Errorf("after ack: updated_at %s, lease_expires_at %v, attempts %d", after.UpdatedAt, after.LeaseExpiresAt, after.Attempts)
			}
			if len(attempts) != 1 || attempts[0].Status != storage.AttemptSucceeded {
				t.Fatalf("attempts %+v, want one succeeded", attempts)
			}
			wantTime(t, "attempt finished_at", attempts[0].FinishedAt, now)
		})
	}
}

func ackOf(task storage.Task) storage.AckItem {
	return storage.AckItem{TaskID: task.ID, LeaseToken: *task.LeaseToken, WorkerID: *task.ClaimedBy,
		Result: json.RawMessage(`{"n":1}`)}
}

// TestAckManyDuplicates: an id given twice in one batch is acked once (one entry,
// one succeeded attempt); of a stale and a current token for one task, the current
// one's ack is the one applied. (The group commit above it then answers the first
// of duplicate items and rejects the others.)
func TestAckManyDuplicates(t *testing.T) {
	t.Parallel()
	db := caseDB(t)
	for _, tc := range []struct {
		name   string
		batch  func(r *rig, task storage.Task) (storage.Task, []storage.AckItem)
		result string
	}{
		{"same item twice", func(r *rig, task storage.Task) (storage.Task, []storage.AckItem) {
			return task, []storage.AckItem{ackOf(task), ackOf(task)}
		}, `{"n": 1}`},
		{"stale then current token", func(r *rig, task storage.Task) (storage.Task, []storage.AckItem) {
			again := r.staleLease(task)
			stale, cur := ackOf(task), ackOf(again)
			stale.Result, cur.Result = json.RawMessage(`{"stale":true}`), json.RawMessage(`{"current":true}`)
			return again, []storage.AckItem{stale, cur}
		}, `{"current": true}`},
		{"current then stale token", func(r *rig, task storage.Task) (storage.Task, []storage.AckItem) {
			again := r.staleLease(task)
			stale, cur := ackOf(task), ackOf(again)
			stale.Result, cur.Result = json.RawMessage(`{"stale":true}`), json.RawMessage(`{"current":true}`)
			return again, []storage.AckItem{cur, stale}
		}, `{"current": true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, db)
			task, items := tc.batch(r, r.start(3, 0))
			other := r.start(3, 0) // a second task in the same batch, acked normally
			items = append(items, ackOf(other))
			got, err := r.s.AckMany(context.Background(), items, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("AckMany returned %d tasks, want 2 (one per id)", len(got))
			}
			if d := got[task.ID]; d.Status != storage.StatusDone || *d.LeaseToken != *task.LeaseToken {
				t.Errorf("returned %s under token %s, want done under %s", d.Status, tokenOf(d), task.LeaseToken)
			}
			after, attempts := r.get(task.ID)
			if after.Status != storage.StatusDone || string(after.Result) != tc.result {
				t.Errorf("status %s result %s, want done with %s", after.Status, after.Result, tc.result)
			}
			succeeded := 0
			for _, a := range attempts {
				if a.Status == storage.AttemptSucceeded {
					succeeded++
				}
			}
			if succeeded != 1 || len(attempts) != task.Attempts {
				t.Errorf("attempts %+v: want %d, one succeeded", attempts, task.Attempts)
			}
			if o, _ := r.get(other.ID); o.Status != storage.StatusDone {
				t.Errorf("the other task of the batch: %s, want done", o.Status)
			}
		})
	}
}

// TestNackTransitions: a nack under the held lease ends the attempt failed and
// moves the task to retry (due exactly now + the delay), dead (no budget left, or
// not retryable) or cancelled (cancel requested); a nack without the lease changes
// nothing.
func TestNackTransitions(t *testing.T) {
	t.Parallel()
	db := caseDB(t)
	for _, tc := range []struct {
		name       string
		maxRetries int
		prepare    func(r *rig, task storage.Task) (storage.Task, storage.Nack)
		status     string        // "" = ErrLeaseLost, nothing changes
		delay      time.Duration // retry: scheduled_at = now + delay
		attempt    string        // the attempt's outcome
	}{
		{"retryable with budget", 3, func(r *rig, task storage.Task) (storage.Task, storage.Nack) {
			r.clock.Advance(5 * time.Second)
			return task, nackOf(task, true)
		}, storage.StatusRetry, backoff, storage.AttemptFailed},
		{"retry after overrides the backoff", 3, func(r *rig, task storage.Task) (storage.Task, storage.Nack) {
			n := nackOf(task, true)
			n.RetryAfterMs = ptr[int64](250)
			return task, n
		}, storage.StatusRetry, 250 * time.Millisecond, storage.AttemptFailed},
		{"not retryable", 3, func(r *rig, task storage.Task) (storage.Task, storage.Nack) {
			return task, nackOf(task, false)
		}, storage.StatusDead, 0, storage.AttemptFailed},
		{"no retries", 0, func(r *rig, task storage.Task) (storage.Task, storage.Nack) {
			return task, nackOf(task, true)
		}, storage.StatusDead, 0, storage.AttemptFailed},
		{"last retry spent", 1, func(r *rig, task storage.Task) (storage.Task, storage.Nack) {
			// Attempt 1 fails into retry; attempt 2 is the last the budget allows.
			if _, err := r.s.Nack(context.Background(), nackOf(task, true)); err != nil {
				r.t.Fatal(err)
			}
			r.clock.Advance(backoff)
			again := r.claim(task.ID)
			return again, nackOf(again, true)
		}, storage.StatusDead, 0, storage.AttemptFailed},
		{"releases spend no budget", 1, func(r *rig, task storage.Task) (storage.Task, storage.Nack) {
			// Two releases, then a failure: attempts 3 - releases 2 = 1, within
			// max_retries 1, so the task retries.
			for range 2 {
				if _, err := r.s.Release(context.Background(), releaseOf(task, nil)); err != nil {
					r.t.Fatal(err)
				}
				task = r.claim(task.ID)
			}
			return task, nackOf(task, true)
		}, storage.StatusRetry, backoff, storage.AttemptFailed},
		{"cancel requested", 3, func(r *rig, task storage.Task) (storage.Task, storage.Nack) {
			r.requestCancel(task.ID)
			return task, nackOf(task, true)
		}, storage.StatusCancelled, 0, storage.AttemptCancelled},
		{"expired lease", 3, func(r *rig, task storage.Task) (storage.Task, storage.Nack) {
			r.clock.Set(*task.LeaseExpiresAt)
			return task, nackOf(task, true)
		}, "", 0, ""},
		{"stale token after a reclaim and a new claim", 3, func(r *rig, task storage.Task) (storage.Task, storage.Nack) {
			again := r.staleLease(task)
			return again, nackOf(task, true)
		}, "", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, db)
			task, n := tc.prepare(r, r.start(tc.maxRetries, 0))
			before, beforeAttempts := r.get(task.ID)

			_, err := r.s.Nack(context.Background(), n)
			if tc.status == "" {
				wantLeaseLost(t, err)
				r.unchanged(before, beforeAttempts)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			now := r.clock.Now()
			after, attempts := r.get(task.ID)
			if after.Status != tc.status || after.Attempts != before.Attempts || after.Releases != before.Releases {
				t.Errorf("status %s attempts %d releases %d, want %s %d %d", after.Status, after.Attempts, after.Releases,
					tc.status, before.Attempts, before.Releases)
			}
			if after.LeaseExpiresAt != nil || after.LastError == nil || *after.LastError != "boom" {
				t.Errorf("lease_expires_at %v, last_error %v", after.LeaseExpiresAt, after.LastError)
			}
			if !after.UpdatedAt.Equal(now) {
				t.Errorf("updated_at %s, want %s", after.UpdatedAt, now)
			}
			if tc.status == storage.StatusRetry {
				wantTime(t, "scheduled_at", &after.ScheduledAt, now.Add(tc.delay))
				if after.FinishedAt != nil {
					t.Errorf("finished_at %v, want none while retrying", after.FinishedAt)
				}
				r.wantDueAt(task.ID, now.Add(tc.delay))
			} else {
				wantTime(t, "finished_at", after.FinishedAt, now)
				if !after.ScheduledAt.Equal(before.ScheduledAt) {
					t.Errorf("scheduled_at moved to %s", after.ScheduledAt)
				}
			}
			last := attempts[len(attempts)-1]
			if len(attempts) != after.Attempts || last.Status != tc.attempt {
				t.Fatalf("attempts %+v, want %d, the last %s", attempts, after.Attempts, tc.attempt)
			}
			wantTime(t, "attempt finished_at", last.FinishedAt, now)
		})
	}
}

func nackOf(task storage.Task, retryable bool) storage.Nack {
	return storage.Nack{TaskID: task.ID, LeaseToken: *task.LeaseToken, WorkerID: *task.ClaimedBy,
		Error: "boom", Retryable: retryable}
}

func releaseOf(task storage.Task, delayMs *int64) storage.Release {
	return storage.Release{TaskID: task.ID, LeaseToken: *task.LeaseToken, WorkerID: *task.ClaimedBy,
		Reason: "stopping", DelayMs: delayMs}
}

// wantDueAt fails unless task id is dispatched at due and not a microsecond before.
func (r *rig) wantDueAt(id uuid.UUID, due time.Time) {
	r.t.Helper()
	saved := r.clock.Now()
	defer r.clock.Set(saved)
	ctx := context.Background()
	r.clock.Set(due.Add(-time.Microsecond))
	if got, err := r.s.DispatchDue(ctx, "q", 100, 1<<40); err != nil || len(got) != 0 {
		r.t.Fatalf("dispatch a microsecond before %s: %v, %v; want nothing", due, got, err)
	}
	r.clock.Set(due)
	got, err := r.s.DispatchDue(ctx, "q", 100, 1<<40)
	if err != nil || len(got) != 1 || got[0].ID != id {
		r.t.Fatalf("dispatch at %s: %v, %v; want %s", due, got, err, id)
	}
}

// TestReleaseTransitions: a release under the held lease hands the task back
// pending without spending budget (releases + 1), keeping its place in line or
// snoozed exactly now + the delay; a cancel request cancels it instead; a release
// without the lease changes nothing.
func TestReleaseTransitions(t *testing.T) {
	t.Parallel()
	db := caseDB(t)
	for _, tc := range []struct {
		name    string
		prepare func(r *rig, task storage.Task) storage.Release
		status  string           // "" = ErrLeaseLost, nothing changes
		due     func() time.Time // pending: when it is dispatched again
	}{
		{"keeps its place", func(r *rig, task storage.Task) storage.Release {
			r.clock.Set(task.LeaseExpiresAt.Add(-time.Second))
			return releaseOf(task, nil)
		}, storage.StatusPending, func() time.Time { return t0.Add(-time.Second) }},
		{"snooze", func(r *rig, task storage.Task) storage.Release {
			r.clock.Advance(2 * time.Second)
			return releaseOf(task, ptr[int64](5000))
		}, storage.StatusPending, func() time.Time { return t0.Add(7 * time.Second) }},
		{"cancel requested", func(r *rig, task storage.Task) storage.Release {
			r.requestCancel(task.ID)
			return releaseOf(task, ptr[int64](5000))
		}, storage.StatusCancelled, nil},
		{"expired lease", func(r *rig, task storage.Task) storage.Release {
			r.clock.Set(task.LeaseExpiresAt.Add(time.Millisecond))
			return releaseOf(task, nil)
		}, "", nil},
		{"stale token after a reclaim and a new claim", func(r *rig, task storage.Task) storage.Release {
			r.staleLease(task)
			return releaseOf(task, nil)
		}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, db)
			task := r.start(3, 0)
			rel := tc.prepare(r, task)
			before, beforeAttempts := r.get(task.ID)

			_, err := r.s.Release(context.Background(), rel)
			if tc.status == "" {
				wantLeaseLost(t, err)
				r.unchanged(before, beforeAttempts)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			now := r.clock.Now()
			after, attempts := r.get(task.ID)
			wantReleases := before.Releases
			if tc.status == storage.StatusPending {
				wantReleases++
			}
			if after.Status != tc.status || after.Releases != wantReleases || after.Attempts != 1 || after.LeaseExpiresAt != nil {
				t.Errorf("status %s releases %d attempts %d lease %v; want %s %d 1 none",
					after.Status, after.Releases, after.Attempts, after.LeaseExpiresAt, tc.status, wantReleases)
			}
			wantOutcome := storage.AttemptReleased
			if tc.status == storage.StatusCancelled {
				wantOutcome = storage.AttemptCancelled
				wantTime(t, "finished_at", after.FinishedAt, now)
			} else {
				wantTime(t, "scheduled_at", &after.ScheduledAt, tc.due())
				r.wantDueAt(task.ID, tc.due())
			}
			if len(attempts) != 1 || attempts[0].Status != wantOutcome {
				t.Fatalf("attempts %+v, want one %s", attempts, wantOutcome)
			}
			wantTime(t, "attempt finished_at", attempts[0].FinishedAt, now)
		})
	}
}

// TestReleasesKeepTheBudget: the retry budget is attempts − releases. A task with
// max_retries 0 released three times still gets its one attempt (it is claimed a
// fourth time, and acks); its one failure then is the last (dead), whether a nack
// or an expired lease says so.
func TestReleasesKeepTheBudget(t *testing.T) {
	t.Parallel()
	db := caseDB(t)
	for _, end := range []string{"ack", "nack", "expire"} {
		t.Run(end, func(t *testing.T) {
			r := newRig(t, db)
			task := r.start(0, 0)
			for i := range 3 {
				if _, err := r.s.Release(context.Background(), releaseOf(task, nil)); err != nil {
					t.Fatal(err)
				}
				r.clock.Advance(time.Second)
				task = r.claim(task.ID)
				if task.Attempts != i+2 || task.Releases != i+1 {
					t.Fatalf("claim %d: attempts %d releases %d", i+2, task.Attempts, task.Releases)
				}
			}
			want := storage.StatusDead
			switch end {
			case "ack":
				want = storage.StatusDone
				if _, err := r.s.Ack(context.Background(), worker, task.ID, *task.LeaseToken, nil); err != nil {
					t.Fatal(err)
				}
			case "nack":
				if _, err := r.s.Nack(context.Background(), nackOf(task, true)); err != nil {
					t.Fatal(err)
				}
			case "expire":
				r.clock.Set(*task.LeaseExpiresAt)
				if got := r.reclaim(); len(got) != 1 || got[0].Status != storage.StatusDead {
					t.Fatalf("reclaim %+v, want the task dead", got)
				}
			}
			after, attempts := r.get(task.ID)
			if after.Status != want || after.Attempts != 4 || after.Releases != 3 {
				t.Errorf("status %s attempts %d releases %d, want %s 4 3", after.Status, after.Attempts, after.Releases, want)
			}
			var outcomes []string
			for _, a := range attempts {
				outcomes = append(outcomes, a.Status)
			}
			if got := strings.Join(outcomes, ","); !strings.HasPrefix(got, "released,released,released,") {
				t.Errorf("attempt outcomes %s", got)
			}
		})
	}
}

// TestHeartbeatTransitions: a heartbeat under the held lease extends it to exactly
// now + the lease, never past the attempt's deadline, and reports a cancel request;
// without the lease it changes nothing. Heartbeat and HeartbeatMany agree.
func TestHeartbeatTransitions(t *testing.T) {
	t.Parallel()
	db := caseDB(t)
	for _, tc := range []struct {
		name    string
		timeout int // the task's timeout_seconds (0: none)
		prepare func(r *rig, task storage.Task) storage.Task
		held    bool
		cancel  bool
		expires func(r *rig, task storage.Task) time.Time
	}{
		{"extends from now", 0, func(r *rig, task storage.Task) storage.Task {
			r.clock.Advance(20 * time.Second)
			return task
		}, true, false, func(r *rig, _ storage.Task) time.Time { return r.clock.Now().Add(lease) }},
		{"never past the deadline", 40, func(r *rig, task storage.Task) storage.Task {
			r.clock.Advance(29 * time.Second) // now + lease is t0 + 59 s, past the t0 + 40 s deadline
			return task
		}, true, false, func(*rig, storage.Task) time.Time { return t0.Add(40 * time.Second) }},
		{"cancel requested", 0, func(r *rig, task storage.Task) storage.Task {
			r.requestCancel(task.ID)
			r.clock.Advance(time.Second)
			return task
		}, true, true, func(r *rig, _ storage.Task) time.Time { return r.clock.Now().Add(lease) }},
		{"at expiry", 0, func(r *rig, task storage.Task) storage.Task {
			r.clock.Set(*task.LeaseExpiresAt)
			return task
		}, false, false, nil},
		{"stale token after a reclaim and a new claim", 0, func(r *rig, task storage.Task) storage.Task {
			r.staleLease(task)
			return task
		}, false, false, nil},
	} {
		for _, many := range []bool{false, true} {
			name := tc.name + "/Heartbeat"
			if many {
				name = tc.name + "/HeartbeatMany"
			}
			t.Run(name, func(t *testing.T) {
				r := newRig(t, db)
				task := tc.prepare(r, r.start(3, tc.timeout))
				before, beforeAttempts := r.get(task.ID)

				var l storage.Lease
				var err error
				if many {
					var held map[uuid.UUID]storage.Lease
					held, err = r.s.HeartbeatMany(context.Background(), worker,
						[]storage.LeaseRef{{TaskID: task.ID, LeaseToken: *task.LeaseToken}}, lease)
					var ok bool
					if l, ok = held[task.ID]; err == nil && !ok {
						err = storage.ErrLeaseLost
					}
				} else {
					l, err = r.s.Heartbeat(context.Background(), worker, task.ID, *task.LeaseToken, lease)
				}
				if !tc.held {
					wantLeaseLost(t, err)
					r.unchanged(before, beforeAttempts)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				want := tc.expires(r, task)
				if !l.ExpiresAt.Equal(want) || l.CancelRequested != tc.cancel {
					t.Errorf("lease until %s cancel %v, want %s %v", l.ExpiresAt, l.CancelRequested, want, tc.cancel)
				}
				after, _ := r.get(task.ID)
				wantTime(t, "lease_expires_at", after.LeaseExpiresAt, want)
				wantTime(t, "heartbeat_at", after.HeartbeatAt, r.clock.Now())
				if after.Status != storage.StatusExecuting || *after.LeaseToken != *task.LeaseToken {
					t.Errorf("status %s token %s", after.Status, tokenOf(after))
				}
			})
		}
	}
}

// TestReclaimTransitions: the watchdog takes exactly the attempts whose lease has
// expired at its now: abandoned (the worker went quiet) or timed_out (the deadline
// passed) into retry due now + the backoff, dead past the budget, cancelled when a
// cancel was requested.
func TestReclaimTransitions(t *testing.T) {
	t.Parallel()
	db := caseDB(t)
	for _, tc := range []struct {
		name       string
		maxRetries int
		timeout    int
		prepare    func(r *rig, task storage.Task)
		status     string // "" = not reclaimed
		outcome    string
		lastError  string
	}{
		{"lease held", 3, 0, func(r *rig, task storage.Task) {
			r.clock.Set(task.LeaseExpiresAt.Add(-time.Microsecond))
		}, "", "", ""},
		{"lease expired", 3, 0, func(r *rig, task storage.Task) {
			r.clock.Set(*task.LeaseExpiresAt)
		}, storage.StatusRetry, storage.AttemptAbandoned, "lease expired: worker w1 stopped heartbeating"},
		{"deadline passed", 3, 10, func(r *rig, task storage.Task) {
			r.clock.Set(t0.Add(10 * time.Second)) // the lease is cut at the 10 s deadline
		}, storage.StatusRetry, storage.AttemptTimedOut, "attempt timed out after 10 s"},
		{"no budget left", 0, 0, func(r *rig, task storage.Task) {
			r.clock.Set(task.LeaseExpiresAt.Add(time.Hour))
		}, storage.StatusDead, storage.AttemptAbandoned, "lease expired: worker w1 stopped heartbeating"},
		{"cancel requested", 3, 0, func(r *rig, task storage.Task) {
			r.requestCancel(task.ID)
			r.clock.Set(*task.LeaseExpiresAt)
		}, storage.StatusCancelled, storage.AttemptCancelled, ""},
		{"heartbeat moved the expiry", 3, 0, func(r *rig, task storage.Task) {
			r.clock.Advance(20 * time.Second)
			if _, err := r.s.Heartbeat(context.Background(), worker, task.ID, *task.LeaseToken, lease); err != nil {
				r.t.Fatal(err)
			}
			r.clock.Set(task.LeaseExpiresAt.Add(time.Second)) // past the first lease, not the second
		}, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, db)
			task := r.start(tc.maxRetries, tc.timeout)
			tc.prepare(r, task)
			before, beforeAttempts := r.get(task.ID)

			got := r.reclaim()
			if tc.status == "" {
				if len(got) != 0 {
					t.Fatalf("reclaimed %+v, want nothing", got)
				}
				r.unchanged(before, beforeAttempts)
				return
			}
			now := r.clock.Now()
			if len(got) != 1 || got[0].TaskID != task.ID || got[0].Status != tc.status || got[0].Outcome != tc.outcome ||
				got[0].Attempt != 1 || got[0].WorkerID != worker || !got[0].StartedAt.Equal(t0) || !got[0].EndedAt.Equal(now) {
				t.Fatalf("reclaimed %+v, want %s: %s→%s, from %s to %s", got, task.ID, tc.outcome, tc.status, t0, now)
			}
			after, attempts := r.get(task.ID)
			if after.Status != tc.status || after.LeaseExpiresAt != nil {
				t.Errorf("status %s lease %v", after.Status, after.LeaseExpiresAt)
			}
			if tc.lastError != "" && (after.LastError == nil || *after.LastError != tc.lastError) {
				t.Errorf("last_error %v, want %q", after.LastError, tc.lastError)
			}
			if tc.status == storage.StatusRetry {
				wantTime(t, "scheduled_at", &after.ScheduledAt, now.Add(backoff))
				r.wantDueAt(task.ID, now.Add(backoff))
			} else {
				wantTime(t, "finished_at", after.FinishedAt, now)
			}
			if len(attempts) != 1 || attempts[0].Status != tc.outcome {
				t.Fatalf("attempts %+v, want one %s", attempts, tc.outcome)
			}
			wantTime(t, "attempt finished_at", attempts[0].FinishedAt, now)
			if again := r.reclaim(); len(again) != 0 {
				t.Errorf("a second pass reclaimed %+v", again)
			}
		})
	}
}

// TestCancelTransitions: a cancel ends a waiting task at once and flags an
// executing one (cancel_requested) for its worker, whose next call ends it
// cancelled; a finished task is not cancellable.
func TestCancelTransitions(t *testing.T) {
	t.Parallel()
	db := caseDB(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		prepare func(r *rig) uuid.UUID
		status  string // after the cancel; "" = ErrTaskNotCancellable
		from    string
	}{
		{"pending", func(r *rig) uuid.UUID { return r.enqueue(3, 0) }, storage.StatusCancelled, storage.StatusPending},
		{"claimed (buffered)", func(r *rig) uuid.UUID {
			id := r.enqueue(3, 0)
			if _, err := r.s.DispatchDue(ctx, "q", 100, 1<<40); err != nil {
				r.t.Fatal(err)
			}
			return id
		}, storage.StatusCancelled, storage.StatusBuffered},
		{"retry", func(r *rig) uuid.UUID {
			task := r.start(3, 0)
			if _, err := r.s.Nack(ctx, nackOf(task, true)); err != nil {
				r.t.Fatal(err)
			}
			return task.ID
		}, storage.StatusCancelled, storage.StatusRetry},
		{"executing", func(r *rig) uuid.UUID { return r.start(3, 0).ID }, storage.StatusExecuting, storage.StatusExecuting},
		{"done", func(r *rig) uuid.UUID {
			task := r.start(3, 0)
			if _, err := r.s.Ack(ctx, worker, task.ID, *task.LeaseToken, nil); err != nil {
				r.t.Fatal(err)
			}
			return task.ID
		}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, db)
			id := tc.prepare(r)
			c, err := r.s.CancelTask(ctx, "q", id)
			if tc.status == "" {
				if !errors.Is(err, storage.ErrTaskNotCancellable) {
					t.Fatalf("cancel: %v, want ErrTaskNotCancellable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			after, _ := r.get(id)
			if c.FromStatus != tc.from || after.Status != tc.status || after.CancelRequested != (tc.status == storage.StatusExecuting) {
				t.Errorf("cancel from %s: now %s (cancel_requested %v); want from %s to %s",
					c.FromStatus, after.Status, after.CancelRequested, tc.from, tc.status)
			}
			if tc.status == storage.StatusCancelled {
				if after.FinishedAt == nil {
					t.Error("no finished_at")
				}
				// Nothing dispatches or claims it any more.
				r.clock.Advance(time.Hour)
				if got, err := r.s.DispatchDue(ctx, "q", 100, 1<<40); err != nil || len(got) != 0 {
					t.Errorf("dispatch after the cancel: %v, %v", got, err)
				}
				if got, err := testenv.Claim(ctx, r.s, []uuid.UUID{id}, worker, lease); err != nil || len(got) != 0 {
					t.Errorf("claim after the cancel: %v, %v", got, err)
				}
			}
		})
	}
}

// TestClaimLease: a claim's lease runs exactly from the claim's now, cut at the
// attempt's deadline; an id given twice is claimed once, and a task not in the
// buffer is not claimed.
func TestClaimLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t, caseDB(t))
	short := r.enqueue(3, 10)
	long := r.enqueue(3, 0)
	r.clock.Advance(3 * time.Second)
	if got, err := r.s.DispatchDue(ctx, "q", 100, 1<<40); err != nil || len(got) != 2 {
		t.Fatalf("dispatch: %v, %v", got, err)
	}
	waiting := r.enqueue(3, 0) // pending, not dispatched: not claimable
	claimed, err := r.s.ClaimMany(ctx, []storage.ClaimItem{{TaskID: short, WorkerID: worker},
		{TaskID: long, WorkerID: worker}, {TaskID: long, WorkerID: "w2"}, {TaskID: waiting, WorkerID: worker}}, lease)
	if err != nil {
		t.Fatal(err)
	}
	now := r.clock.Now()
	if len(claimed) != 2 {
		t.Fatalf("claimed %d tasks, want 2 (long once, waiting not dispatched)", len(claimed))
	}
	wantTime(t, "short lease", claimed[short].LeaseExpiresAt, now.Add(10*time.Second))
	wantTime(t, "long lease", claimed[long].LeaseExpiresAt, now.Add(lease))
	for _, id := range []uuid.UUID{short, long} {
		after, attempts := r.get(id)
		wantTime(t, "heartbeat_at", after.HeartbeatAt, now)
		wantTime(t, "attempt_started_at", after.AttemptStartedAt, now)
		if after.Status != storage.StatusExecuting || after.Attempts != 1 || len(attempts) != 1 || !attempts[0].StartedAt.Equal(now) {
			t.Errorf("%s: status %s attempts %d %+v", id, after.Status, after.Attempts, attempts)
		}
	}
	if w, _ := r.get(waiting); w.Status != storage.StatusPending {
		t.Errorf("the task left waiting is %s", w.Status)
	}
}
