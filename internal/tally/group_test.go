package tally_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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

// groupDeltas reads the group deltas appended after id *after (as
// "queue/group/status:delta", sorted) and moves *after past them.
func groupDeltas(t *testing.T, s *storage.Store, after *int64) []string {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `SELECT id, queue, group_key, status, delta
		FROM group_tally_delta WHERE id > $1 ORDER BY id`, *after)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var id int64
	var queue, group, status string
	var delta int
	if _, err := pgx.ForEachRow(rows, []any{&id, &queue, &group, &status, &delta}, func() error {
		out = append(out, fmt.Sprintf("%s/%s/%s:%d", queue, group, status, delta))
		*after = id
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// wantDeltas fails unless the group deltas appended since *after are want (sorted).
func wantDeltas(t *testing.T, s *storage.Store, after *int64, step string, want ...string) {
	t.Helper()
	got := groupDeltas(t, s, after)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: group deltas %q, want %q", step, got, want)
	}
}

// newGrouped returns a task of group g ("" = the unnamed group).
func newGrouped(g string) storage.NewTask {
	tk := storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{}`), Priority: 5}
	if g != "" {
		tk.Group = &g
	}
	return tk
}

// TestHotPathStatementsWriteGroupDeltasPerGroup runs every statement that writes its
// group deltas inline (migration 0028: the enqueues whole and as refs, buffered or
// pending, with idempotency keys, the debounced enqueue, the claim, the plain ack
// whole and as refs, and the ack with a claim), each on batches mixing groups, queues
// and the unnamed group, and checks that each appends one delta per (queue, group,
// status), not one per task, that no row trigger counts them again, and that the
// kept counts stay what count(*) says; the statements off the hot path (dispatch,
// nack, cancel) and a debounce that moves a task to another group are still counted
// by the triggers, as is every statement on a connection without the hot path's
// settings.
func TestHotPathStatementsWriteGroupDeltasPerGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.NewStore(t)
	f := tally.New(s, tally.Config{BatchSize: 3}, quiet)
	newQueue(t, s, "q", 0)
	newQueue(t, s, "p", 0)
	var after int64
	type C = storage.GroupCounts

	// enqueue_tasks, pending
	if _, err := s.Enqueue(ctx, "q", []storage.NewTask{newGrouped("a"), newGrouped("a"), newGrouped(""),
		newGrouped("b"), newGrouped("a"), newGrouped("")}, nil); err != nil {
		t.Fatal(err)
	}
	wantDeltas(t, s, &after, "enqueue", "q/a/pending:3", "q/b/pending:1")
	// enqueue_task_refs, straight into the buffer (claimed)
	out, err := s.EnqueueWith(ctx, "p", []storage.NewTask{newGrouped("a"), newGrouped("c"), newGrouped(""),
		newGrouped("c")}, storage.EnqueueOptions{Refs: true, Buffered: true})
	if err != nil || out[1].Task.Status != storage.StatusBuffered {
		t.Fatalf("buffered enqueue: %+v %v", out, err)
	}
	wantDeltas(t, s, &after, "buffered refs enqueue", "p/a/claimed:1", "p/c/claimed:2")
	// enqueue_tasks in a transaction, with idempotency keys
	keyed := []storage.NewTask{newGrouped("a"), newGrouped("d"), newGrouped("d")}
	for i := range keyed {
		k := fmt.Sprintf("key-%d", i)
		keyed[i].IdempotencyKey, keyed[i].Fingerprint = &k, []byte{byte(i)}
	}
	if _, err := s.Enqueue(ctx, "q", keyed, nil); err != nil {
		t.Fatal(err)
	}
	wantDeltas(t, s, &after, "keyed enqueue", "q/a/pending:1", "q/d/pending:2")
	// a repeat of the keys inserts nothing and counts nothing
	if _, err := s.Enqueue(ctx, "q", keyed, nil); err != nil {
		t.Fatal(err)
	}
	wantDeltas(t, s, &after, "repeated keyed enqueue")
	groupsExact(t, s, "q", map[string]C{"a": {Pending: 4}, "b": {Pending: 1}, "d": {Pending: 2}})
	groupsExact(t, s, "p", map[string]C{"a": {Claimed: 1}, "c": {Claimed: 2}})

	// enqueue_debounced: created inline; a replacement into another group by the
	// update trigger; one into the same group changes no count.
	key := "k"
	for i, g := range []string{"e", "f", "f"} {
		tk := newGrouped(g)
		tk.DebounceKey, tk.DebounceMs = &key, 60_000
		out, err := s.Enqueue(ctx, "q", []storage.NewTask{tk}, nil)
		if err != nil || (i > 0) != out[0].Replaced {
			t.Fatalf("debounce %d: %+v %v", i, out, err)
		}
		switch i {
		case 0:
			wantDeltas(t, s, &after, "debounce created", "q/e/pending:1")
		case 1:
			wantDeltas(t, s, &after, "debounce into another group", "q/e/pending:-1", "q/f/pending:1")
		case 2:
			wantDeltas(t, s, &after, "debounce in the same group")
		}
	}
	groupsExact(t, s, "q", map[string]C{"a": {Pending: 4}, "b": {Pending: 1}, "d": {Pending: 2}, "f": {Pending: 1}})

	// The dispatch (main pool) is the triggers': one row per task and status.
	due, err := s.DispatchDue(ctx, "q", 100, 1e13)
	if err != nil || len(due) != 9 {
		t.Fatalf("dispatched %d (%v)", len(due), err)
	}
	if got := groupDeltas(t, s, &after); len(got) != 2*7 {
		t.Fatalf("dispatch of 7 named tasks: group deltas %q", got)
	}
	if _, err := f.FoldOnce(ctx); err != nil {
		t.Fatal(err)
	}
	groupsExact(t, s, "q", map[string]C{"a": {Claimed: 4}, "b": {Claimed: 1}, "d": {Claimed: 2}, "f": {Pending: 1}})

	// claim_tasks: both queues' buffered tasks in one statement.
	var items []storage.ClaimItem
	for _, d := range due {
		items = append(items, storage.ClaimItem{TaskID: d.ID, WorkerID: "w"})
	}
	for _, e := range out {
		items = append(items, storage.ClaimItem{TaskID: e.Task.ID, WorkerID: "w"})
	}
	claimed, err := s.ClaimMany(ctx, items, time.Minute)
	if err != nil || len(claimed) != 13 {
		t.Fatalf("claimed %d (%v)", len(claimed), err)
	}
	wantDeltas(t, s, &after, "claim",
		"q/a/claimed:-4", "q/a/executing:4", "q/b/claimed:-1", "q/b/executing:1", "q/d/claimed:-2", "q/d/executing:2",
		"p/a/claimed:-1", "p/a/executing:1", "p/c/claimed:-2", "p/c/executing:2")
	groupsExact(t, s, "q", map[string]C{"a": {Executing: 4}, "b": {Executing: 1}, "d": {Executing: 2}, "f": {Pending: 1}})
	groupsExact(t, s, "p", map[string]C{"a": {Executing: 1}, "c": {Executing: 2}})

	// The claimed tasks by queue and group ("" = the unnamed group).
	held := map[string][]storage.AckItem{}
	for _, tk := range claimed {
		g := ""
		if tk.Group != nil {
			g = *tk.Group
		}
		held[tk.Queue+"/"+g] = append(held[tk.Queue+"/"+g], storage.AckItem{TaskID: tk.ID, LeaseToken: *tk.LeaseToken, WorkerID: "w"})
	}
	take := func(qg string, n int) []storage.AckItem {
		t.Helper()
		if len(held[qg]) < n {
			t.Fatalf("%s holds %d tasks, want %d", qg, len(held[qg]), n)
		}
		items := held[qg][:n]
		held[qg] = held[qg][n:]
		return items
	}

	// ack_plain_tasks: two groups of two queues and the unnamed group.
	acks := slices.Concat(take("q/a", 2), take("p/c", 1), take("q/", 1))
	if acked, err := s.AckMany(ctx, acks, false); err != nil || len(acked) != 4 {
		t.Fatalf("acked %d (%v)", len(acked), err)
	}
	wantDeltas(t, s, &after, "ack", "q/a/executing:-2", "p/c/executing:-1")
	// ack_plain_task_refs
	acks = slices.Concat(take("q/a", 1), take("q/b", 1), take("p/c", 1), take("p/", 0))
	if acked, err := s.AckMany(ctx, acks, true); err != nil || len(acked) != 3 {
		t.Fatalf("acked %d refs (%v)", len(acked), err)
	}
	wantDeltas(t, s, &after, "ack refs", "q/a/executing:-1", "q/b/executing:-1", "p/c/executing:-1")
	groupsExact(t, s, "q", map[string]C{"a": {Executing: 1}, "d": {Executing: 2}, "f": {Pending: 1}})
	groupsExact(t, s, "p", map[string]C{"a": {Executing: 1}})

	// AckAndClaim: the plain ack's refs and the claim in one transaction.
	more, err := s.EnqueueWith(ctx, "p", []storage.NewTask{newGrouped("g"), newGrouped("g"), newGrouped("")},
		storage.EnqueueOptions{Refs: true, Buffered: true})
	if err != nil {
		t.Fatal(err)
	}
	wantDeltas(t, s, &after, "buffered refs enqueue", "p/g/claimed:2")
	items = nil
	for _, e := range more {
		items = append(items, storage.ClaimItem{TaskID: e.Task.ID, WorkerID: "w"})
	}
	acked, again, err := s.AckAndClaim(ctx, slices.Concat(take("q/d", 1), take("p/a", 1), take("p/", 1)), items, time.Minute)
	if err != nil || len(acked) != 3 || len(again) != 3 {
		t.Fatalf("ack and claim: %d acked, %d claimed (%v)", len(acked), len(again), err)
	}
	wantDeltas(t, s, &after, "ack and claim",
		"q/d/executing:-1", "p/a/executing:-1", "p/g/claimed:-2", "p/g/executing:2")
	groupsExact(t, s, "q", map[string]C{"a": {Executing: 1}, "d": {Executing: 1}, "f": {Pending: 1}})
	groupsExact(t, s, "p", map[string]C{"g": {Executing: 2}})

	// Off the hot path the triggers count: a nack to dead, a cancel.
	last := take("q/a", 1)[0]
	if _, err := s.Nack(ctx, storage.Nack{TaskID: last.TaskID, LeaseToken: last.LeaseToken, WorkerID: "w", Error: "x"}); err != nil {
		t.Fatal(err)
	}
	// (the dead task moves into history: out of tasks, into task_history, 0023)
	wantDeltas(t, s, &after, "nack", "q/a/executing:-1", "q/a/dead:1", "q/a/dead:-1", "q/a/dead:1")
	var debounced uuid.UUID
	if err := s.Pool().QueryRow(ctx, `SELECT id FROM tasks WHERE queue = 'q' AND group_key = 'f'`).Scan(&debounced); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelTask(ctx, "q", debounced); err != nil {
		t.Fatal(err)
	}
	wantDeltas(t, s, &after, "cancel", "q/f/pending:-1")

	// A store without a hot pool (the main pool's connections): the triggers count
	// every task, and the statements' group CTEs write nothing.
	plain := storage.New(s.Pool())
	if _, err := plain.Enqueue(ctx, "q", []storage.NewTask{newGrouped("h"), newGrouped("h"), newGrouped("")}, nil); err != nil {
		t.Fatal(err)
	}
	wantDeltas(t, s, &after, "enqueue on the main pool", "q/h/pending:1", "q/h/pending:1")
	held2 := claim(t, plain, "q", 10, time.Minute)
	if len(held2) != 3 {
		t.Fatalf("claimed %d on the main pool", len(held2))
	}
	if got := groupDeltas(t, s, &after); len(got) != 8 {
		t.Fatalf("dispatch and claim of 2 named tasks on the main pool: group deltas %q", got)
	}
	var h storage.Task
	for _, tk := range held2 {
		if tk.Group != nil {
			h = tk
		}
	}
	if _, err := plain.AckMany(ctx, []storage.AckItem{{TaskID: h.ID, LeaseToken: *h.LeaseToken, WorkerID: "w"}}, true); err != nil {
		t.Fatal(err)
	}
	wantDeltas(t, s, &after, "ack on the main pool", "q/h/executing:-1")

	// dispatch_due_grouped, a fair queue's dispatch: pending and retry tasks of two
	// groups and the unnamed group in one statement.
	fair := storage.FairnessRoundRobin
	if _, err := s.CreateQueue(ctx, storage.Queue{Name: "fq", MaxRetries: 1, Fairness: &fair}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, "fq", []storage.NewTask{newGrouped("a"), newGrouped("a"), newGrouped("b"), newGrouped("")}, nil); err != nil {
		t.Fatal(err)
	}
	wantDeltas(t, s, &after, "fair enqueue", "fq/a/pending:2", "fq/b/pending:1")
	a := "a"
	first, err := s.DispatchDueGrouped(ctx, "fq", []storage.GroupPick{{Priority: 5, Group: &a, N: 1}})
	if err != nil || len(first) != 1 {
		t.Fatalf("dispatched %d (%v)", len(first), err)
	}
	wantDeltas(t, s, &after, "fair dispatch", "fq/a/pending:-1", "fq/a/claimed:1")
	failed, err := testenv.Claim(ctx, s, []uuid.UUID{first[0].ID}, "w", time.Minute)
	if err != nil || len(failed) != 1 {
		t.Fatalf("claimed %d (%v)", len(failed), err)
	}
	now := int64(0)
	if _, err := s.Nack(ctx, storage.Nack{TaskID: failed[0].ID, LeaseToken: *failed[0].LeaseToken, WorkerID: "w",
		Error: "x", Retryable: true, RetryAfterMs: &now}); err != nil {
		t.Fatal(err)
	}
	wantDeltas(t, s, &after, "fair claim and nack", "fq/a/claimed:-1", "fq/a/executing:1", "fq/a/executing:-1", "fq/a/retry:1")
	b := "b"
	moved, err := s.DispatchDueGrouped(ctx, "fq", []storage.GroupPick{{Priority: 5, Group: &a, N: 5},
		{Priority: 5, Group: &b, N: 5}, {Priority: 5, N: 5}})
	if err != nil || len(moved) != 4 {
		t.Fatalf("dispatched %d (%v)", len(moved), err)
	}
	wantDeltas(t, s, &after, "fair dispatch of pending and retry tasks",
		"fq/a/pending:-1", "fq/a/retry:-1", "fq/a/claimed:2", "fq/b/pending:-1", "fq/b/claimed:1")
	groupsExact(t, s, "fq", map[string]C{"a": {Claimed: 2}, "b": {Claimed: 1}})
	exact(t, s, "fq", map[string]int64{storage.StatusBuffered: 4})

	for range 3 {
		if _, err := f.FoldOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	groupsExact(t, s, "fq", map[string]C{"a": {Claimed: 2}, "b": {Claimed: 1}})
	groupsExact(t, s, "q", map[string]C{"a": {Dead: 1}, "d": {Executing: 1}, "h": {Executing: 1}})
	groupsExact(t, s, "p", map[string]C{"g": {Executing: 2}})
	exact(t, s, "q", nil)
	exact(t, s, "p", nil)
}
