package tally_test

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/tally"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// enqueueGroups enqueues one task of queue per element of groups ("" = the unnamed
// group) and returns their ids.
func enqueueGroups(t *testing.T, s *storage.Store, queue string, groups ...string) []uuid.UUID {
	t.Helper()
	tasks := make([]storage.NewTask, len(groups))
	ids := make([]uuid.UUID, len(groups))
	for i, g := range groups {
		ids[i] = uuid.Must(uuid.NewV7())
		tasks[i] = storage.NewTask{ID: ids[i], Payload: json.RawMessage(`{}`), Priority: 5}
		if g != "" {
			tasks[i].Group = &g
		}
	}
	if _, err := s.Enqueue(context.Background(), queue, tasks, nil); err != nil {
		t.Fatal(err)
	}
	return ids
}

// groupsExact fails unless the kept counts of queue's groups equal what count(*)
// says of its live and finished tasks and, when want is given, equal want (groups
// absent from want must have no unfinished or dead task).
func groupsExact(t *testing.T, s *storage.Store, queue string, want map[string]storage.GroupCounts) {
	t.Helper()
	ctx := context.Background()
	truth := map[string]storage.GroupCounts{}
	rows, err := s.Pool().Query(ctx, `SELECT group_key, status, count(*) FROM all_tasks
		WHERE queue = $1 AND group_key IS NOT NULL GROUP BY 1, 2`, queue)
	if err != nil {
		t.Fatal(err)
	}
	var g, status string
	var n int64
	var names []string
	for rows.Next() {
		if err := rows.Scan(&g, &status, &n); err != nil {
			t.Fatal(err)
		}
		c := truth[g]
		switch status {
		case storage.StatusPending:
			c.Pending = n
		case storage.StatusBlocked:
			c.Blocked = n
		case storage.StatusBuffered:
			c.Claimed = n
		case storage.StatusExecuting:
			c.Executing = n
		case storage.StatusRetry:
			c.Retry = n
		case storage.StatusDead:
			c.Dead = n
		}
		if c != (storage.GroupCounts{}) {
			truth[g] = c
		}
		names = append(names, g)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for g := range want {
		names = append(names, g)
	}
	kept, err := s.CountGroups(ctx, queue, names)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(kept, truth) {
		t.Fatalf("kept group counts of %s %v, count(*) says %v", queue, kept, truth)
	}
	if want != nil && !maps.Equal(kept, want) {
		t.Fatalf("group counts of %s %v, want %v", queue, kept, want)
	}
}

// TestGroupCountsFollowEveryTransition walks grouped tasks through every transition
// that changes a status (and a debounce that changes a task's group), folding at
// different points, and checks after each step that each group's kept counts are
// what count(*) says and what the step should leave; a group whose tasks all
// finished leaves the totals, and the unnamed group is never counted.
func TestGroupCountsFollowEveryTransition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.NewStore(t)
	f := tally.New(s, tally.Config{BatchSize: 2}, quiet)
	newQueue(t, s, "q", 0)
	newQueue(t, s, "other", 0)
	type C = storage.GroupCounts

	enqueueGroups(t, s, "q", "a", "a", "a", "b", "", "")
	enqueueGroups(t, s, "other", "a")
	groupsExact(t, s, "q", map[string]C{"a": {Pending: 3}, "b": {Pending: 1}})
	groupsExact(t, s, "other", map[string]C{"a": {Pending: 1}})
	if _, err := f.FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	groupsExact(t, s, "q", map[string]C{"a": {Pending: 3}, "b": {Pending: 1}})

	tasks := claim(t, s, "q", 6, time.Minute)
	if len(tasks) != 6 {
		t.Fatalf("claimed %d", len(tasks))
	}
	groupsExact(t, s, "q", map[string]C{"a": {Executing: 3}, "b": {Executing: 1}})
	var a, b []storage.Task
	for _, tk := range tasks {
		switch {
		case tk.Group == nil:
		case *tk.Group == "a":
			a = append(a, tk)
		case *tk.Group == "b":
			b = append(b, tk)
		}
	}
	if len(a) != 3 || len(b) != 1 {
		t.Fatalf("claimed %d of a, %d of b", len(a), len(b))
	}
	if _, err := s.Ack(ctx, "w", a[0].ID, *a[0].LeaseToken, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Nack(ctx, storage.Nack{TaskID: a[1].ID, LeaseToken: *a[1].LeaseToken, WorkerID: "w", Error: "x", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, storage.Release{TaskID: a[2].ID, LeaseToken: *a[2].LeaseToken, WorkerID: "w", Reason: "stop"}); err != nil {
		t.Fatal(err)
	}
	groupsExact(t, s, "q", map[string]C{"a": {Pending: 1, Dead: 1}, "b": {Executing: 1}})
	if _, err := f.FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	groupsExact(t, s, "q", map[string]C{"a": {Pending: 1, Dead: 1}, "b": {Executing: 1}})

	// b's only task acked: b leaves the totals once folded.
	if _, err := s.Ack(ctx, "w", b[0].ID, *b[0].LeaseToken, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	groupsExact(t, s, "q", map[string]C{"a": {Pending: 1, Dead: 1}})
	var rowsOfB int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM group_tally WHERE queue = 'q' AND group_key = 'b'`).Scan(&rowsOfB); err != nil || rowsOfB != 0 {
		t.Fatalf("b keeps %d rows in group_tally (%v)", rowsOfB, err)
	}

	// Replay and discard of a's dead task; cancel of its pending one.
	if _, err := s.Replay(ctx, "q", []uuid.UUID{a[1].ID}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.DiscardDead(ctx, "q", a[1].ID); err != nil {
		t.Fatal(err)
	}
	groupsExact(t, s, "q", map[string]C{"a": {Pending: 2}})
	if _, err := s.CancelTask(ctx, "q", a[2].ID); err != nil {
		t.Fatal(err)
	}
	groupsExact(t, s, "q", map[string]C{"a": {Pending: 1}})

	// Lease expiry: the watchdog's reclaim.
	again := claim(t, s, "q", 1, time.Minute)
	if len(again) != 1 {
		t.Fatalf("claimed %d", len(again))
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, again[0].ID); err != nil {
		t.Fatal(err)
	}
	if r, err := s.ReclaimExpired(ctx, 100); err != nil || len(r) != 1 {
		t.Fatalf("reclaim: %d %v", len(r), err)
	}
	groupsExact(t, s, "q", map[string]C{"a": {Dead: 1}})

	// A debounce that replaces the waiting task moves it to the new request's group.
	key := "k"
	for i, g := range []string{"old", "new"} {
		id := uuid.Must(uuid.NewV7())
		out, err := s.Enqueue(ctx, "q", []storage.NewTask{{ID: id, Payload: json.RawMessage(`{}`), Priority: 5,
			DebounceKey: &key, DebounceMs: 60_000, Group: &g}}, nil)
		if err != nil || (i == 1) != out[0].Replaced {
			t.Fatalf("debounce %d: %+v %v", i, out, err)
		}
	}
	groupsExact(t, s, "q", map[string]C{"a": {Dead: 1}, "new": {Pending: 1}})

	// A transaction that rolls back leaves no figure behind.
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A failure below must not leave the connection held: the pool's close at the
	// test's end would wait for it forever.
	defer func() { _ = tx.Rollback(ctx) }()
	// (A finishing update sets finished_at: the task moves into history, 0023.)
	if _, err := tx.Exec(ctx, `UPDATE tasks SET status = 'cancelled', finished_at = now() WHERE queue = 'q' AND status = 'pending'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	groupsExact(t, s, "q", map[string]C{"a": {Dead: 1}, "new": {Pending: 1}})
	groupsExact(t, s, "other", map[string]C{"a": {Pending: 1}})
}
