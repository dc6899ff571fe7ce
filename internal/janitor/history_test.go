package janitor_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/internal/janitor"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// insertHistory inserts n finished tasks of queue and status into history, finished
// at finished and created an hour before, each with one attempt, the first
// withKeys of them holding an idempotency key (reserved in idempotency_keys).
func insertHistory(t *testing.T, pool *pgxpool.Pool, queue, status string, n int, finished time.Time, withKeys int, workflow *uuid.UUID) {
	t.Helper()
	exec(t, pool, `WITH ins AS (
		INSERT INTO task_history (id, queue, payload, priority, status, scheduled_at, max_retries, attempts,
			created_at, updated_at, finished_at, idempotency_key, workflow_id)
		SELECT gen_random_uuid(), $1, jsonb_build_object('i', i), 1, $2, $3::timestamptz - interval '1 hour', 3, 1,
			$3::timestamptz - interval '1 hour', $3, $3,
			CASE WHEN i <= $5 THEN $2 || '-' || $3::text || '-' || i END, $6
		FROM generate_series(1, $4::int) AS i
		RETURNING id, queue, status, created_at, finished_at, idempotency_key
	), att AS (
		INSERT INTO attempt_history (task_id, attempt, queue, worker_id, lease_token, status, started_at,
			finished_at, task_status, task_finished_at)
		SELECT id, 1, queue, 'w', gen_random_uuid(), CASE status WHEN 'done' THEN 'succeeded' ELSE 'failed' END,
			created_at, finished_at, status, finished_at FROM ins
	)
	INSERT INTO idempotency_keys (queue, key, task_id)
	SELECT queue, idempotency_key, id FROM ins WHERE idempotency_key IS NOT NULL`,
		queue, status, finished, n, withKeys, workflow)
}

func exists(t *testing.T, pool *pgxpool.Pool, table string) bool {
	t.Helper()
	return count(t, pool, `SELECT count(*) FROM pg_class WHERE relname = $1`, table) == 1
}

// historyClock returns a janitor and store whose clock reads at, on a database with
// queues q and other.
func historyClock(t *testing.T, at time.Time) (*pgxpool.Pool, *storage.Store) {
	t.Helper()
	pool, _ := setup(t)
	return pool, storage.New(pool, storage.WithClock(func() time.Time { return at }))
}

// TestExpiredDaysOfHistoryAreDropped: a day that every queue's retention has passed
// leaves by dropping its partitions, tasks and attempts together; the keys of its
// tasks stay reserved for their window, which the clock, 7 days ahead, has passed,
// so the same sweep frees them. The tally stays exact and no dead row is left
// behind. Dead tasks, kept forever by default, stay, and so does a day still inside
// the retention.
func TestExpiredDaysOfHistoryAreDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	yesterday := today.AddDate(0, 0, -1)
	// Seven days and a half after today began: yesterday has passed the default
	// 7-day retention whole, today has not.
	pool, store := historyClock(t, today.Add(7*day+12*time.Hour))
	insertHistory(t, pool, "q", "done", 300, yesterday.Add(10*time.Hour), 50, nil)
	insertHistory(t, pool, "other", "done", 200, yesterday.Add(23*time.Hour), 0, nil)
	insertHistory(t, pool, "q", "cancelled", 40, yesterday.Add(time.Hour), 10, nil)
	insertHistory(t, pool, "q", "dead", 30, yesterday.Add(time.Hour), 10, nil)
	insertHistory(t, pool, "q", "done", 100, today.Add(time.Hour), 20, nil)
	yday := "_p" + yesterday.Format("20060102")
	if !exists(t, pool, "task_history_done"+yday) {
		t.Fatal("the migration did not create yesterday's partitions")
	}

	var sweeps []janitor.Sweep
	j := janitor.New(store, store, janitor.Config{OnSweep: func(s janitor.Sweep) { sweeps = append(sweeps, s) }}, quiet)
	var batches []janitor.Batch
	freed := 0
	j.OnBatch = func(b janitor.Batch) {
		batches = append(batches, b)
		if b.Table == "idempotency_keys" {
			freed += b.Deleted
		}
	}
	deleted, err := j.SweepOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if deleted != 540+60 {
		t.Errorf("deleted %d rows, want the 540 done and cancelled tasks of yesterday and their 60 keys", deleted)
	}
	if freed != 60 {
		t.Errorf("the sweep freed %d reserved keys, want the 60 of yesterday's done and cancelled tasks", freed)
	}
	for _, table := range []string{"task_history_done" + yday, "attempt_history_done" + yday,
		"task_history_cancelled" + yday, "attempt_history_cancelled" + yday} {
		if exists(t, pool, table) {
			t.Errorf("%s is still there", table)
		}
	}
	dropped := 0
	for _, b := range batches {
		if b.Dropped {
			dropped++
			if b.Table == "task_history_done"+yday && b.Deleted != 500 {
				t.Errorf("%s dropped with %d tasks, want 500", b.Table, b.Deleted)
			}
		}
	}
	if dropped != 2 {
		t.Errorf("%d days dropped, want 2 (done and cancelled of yesterday): %+v", dropped, batches)
	}
	for status, want := range map[string]int{"done": 100, "cancelled": 0, "dead": 30} {
		if got := count(t, pool, `SELECT count(*) FROM task_history WHERE status = $1`, status); got != want {
			t.Errorf("%d %s tasks left in history, want %d", got, status, want)
		}
		if got := count(t, pool, `SELECT count(*) FROM attempt_history WHERE task_status = $1`, status); got != want {
			t.Errorf("%d attempts of %s tasks left in history, want %d", got, status, want)
		}
	}
	if got := count(t, pool, `SELECT count(*) FROM idempotency_keys`); got != 30 {
		t.Errorf("%d idempotency keys left, want 30 (of today's done and of the dead tasks)", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM idempotency_keys k WHERE NOT EXISTS (SELECT 1 FROM all_tasks t WHERE t.id = k.task_id)`); got != 0 {
		t.Errorf("%d keys of tasks that are gone", got)
	}
	// The tally counts what is left, exactly.
	for _, queue := range []string{"q", "other"} {
		st, err := store.Stats(ctx, queue)
		if err != nil {
			t.Fatal(err)
		}
		for _, status := range []string{"done", "cancelled", "dead"} {
			want := count(t, pool, `SELECT count(*) FROM task_history WHERE queue = $1 AND status = $2`, queue, status)
			if st.Depth[status] != int64(want) {
				t.Errorf("%s: tally says %d %s, history holds %d", queue, st.Depth[status], status, want)
			}
		}
	}
	// Dead tasks are kept forever by default: their day stays.
	if !exists(t, pool, "task_history_dead"+yday) {
		t.Error("yesterday's dead tasks were dropped")
	}
	// Partitions for the days ahead of the clock exist.
	ahead := today.Add(7*day+12*time.Hour).Truncate(24*time.Hour).AddDate(0, 0, 3)
	if !exists(t, pool, "task_history_done_p"+ahead.Format("20060102")) {
		t.Errorf("no partition for %s, three days after the clock's today", ahead.Format(time.DateOnly))
	}
	if len(sweeps) != 0 {
		t.Fatal("SweepOnce reported through OnSweep")
	}
	// A second sweep finds nothing more.
	if n, err := j.SweepOnce(ctx); err != nil || n != 0 {
		t.Errorf("second sweep deleted %d, %v; want 0, nil", n, err)
	}
}

// TestShorterRetentionDeletesInBatches: while one queue keeps done tasks 7 days,
// another's 1-hour retention deletes its own in batches, from the partition that
// stays; a queue keeping dead tasks 1 day loses them although others keep theirs.
func TestShorterRetentionDeletesInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now().UTC()
	pool, store := historyClock(t, now)
	exec(t, pool, `INSERT INTO queues (name, retention) VALUES ('short', '{"done_ms": 3600000, "dead_ms": 86400000}')`)
	insertHistory(t, pool, "short", "done", 250, now.Add(-2*time.Hour), 20, nil)
	insertHistory(t, pool, "short", "done", 10, now.Add(-30*time.Minute), 0, nil)
	insertHistory(t, pool, "q", "done", 50, now.Add(-2*time.Hour), 0, nil)
	insertHistory(t, pool, "short", "dead", 5, now.Add(-25*time.Hour), 0, nil)
	insertHistory(t, pool, "q", "dead", 5, now.Add(-25*time.Hour), 0, nil)
	var taskBatches []int
	j := janitor.New(store, store, janitor.Config{BatchSize: 100}, quiet)
	j.OnBatch = func(b janitor.Batch) {
		if b.Table == "task_history" {
			taskBatches = append(taskBatches, b.Deleted)
		}
	}
	deleted, err := j.SweepOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if deleted != 255 {
		t.Errorf("deleted %d, want the 250 done and 5 dead tasks of queue short", deleted)
	}
	if len(taskBatches) < 3 || taskBatches[0] != 100 {
		t.Errorf("history batches %v, want batches of at most 100", taskBatches)
	}
	for _, tc := range []struct {
		queue, status string
		want          int
	}{{"short", "done", 10}, {"q", "done", 50}, {"short", "dead", 0}, {"q", "dead", 5}} {
		if got := count(t, pool, `SELECT count(*) FROM task_history WHERE queue = $1 AND status = $2`, tc.queue, tc.status); got != tc.want {
			t.Errorf("%d %s tasks of %s left, want %d", got, tc.status, tc.queue, tc.want)
		}
	}
	if got := count(t, pool, `SELECT count(*) FROM attempt_history a WHERE NOT EXISTS (SELECT 1 FROM task_history t WHERE t.id = a.task_id)`); got != 0 {
		t.Errorf("%d attempts of deleted tasks left", got)
	}
	// The keys of the deleted tasks stay reserved for the queue's window (24 h by
	// default) from their creation.
	if got := count(t, pool, `SELECT count(*) FROM idempotency_keys k WHERE k.reserved_until = k.created_at + interval '1 day'
		AND NOT EXISTS (SELECT 1 FROM all_tasks t WHERE t.id = k.task_id)`); got != 20 {
		t.Errorf("%d keys of deleted tasks reserved for their window, want 20", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM idempotency_keys`); got != 20 {
		t.Errorf("%d keys left, want the 20 reserved", got)
	}
}

// TestHistoryKeepsKeysForTheirWindow: the tasks that leave history, by a shorter
// retention's batch or with their day's partitions, keep their idempotency keys
// reserved until their creation + their queue's window (a window of 0 keeps
// nothing); once a sweep's clock passes the window the keys are deleted, and an
// enqueue with one creates a new task.
func TestHistoryKeepsKeysForTheirWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := setup(t) // the database's clock
	yesterday := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	// q keeps keys 7 days, other none; both keep done tasks an hour, and queue long
	// 30 days, so that yesterday's day stays and q's and other's tasks leave in batches.
	exec(t, pool, `UPDATE queues SET retention = '{"done_ms": 3600000}',
		idempotency_window_ms = CASE name WHEN 'q' THEN 604800000 ELSE 0 END`)
	exec(t, pool, `INSERT INTO queues (name, retention) VALUES ('long', '{"done_ms": 2592000000}')`)
	insertHistory(t, pool, "q", "done", 10, yesterday.Add(2*time.Hour), 4, nil)
	insertHistory(t, pool, "other", "done", 10, yesterday.Add(2*time.Hour), 3, nil)
	insertHistory(t, pool, "long", "done", 1, yesterday.Add(3*time.Hour), 0, nil)
	// A key of a deleted task is reserved by its reserved_until; one of a dropped day
	// by its row alone, until created_at + the window (migration 0034).
	reserved := func() int {
		return count(t, pool, `SELECT count(*) FROM idempotency_keys k WHERE k.queue = 'q'
			AND coalesce(k.reserved_until, k.created_at + interval '7 days') = k.created_at + interval '7 days'
			AND NOT EXISTS (SELECT 1 FROM all_tasks t WHERE t.id = k.task_id)`)
	}
	var key string
	var first uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT key, task_id FROM idempotency_keys WHERE queue = 'q' LIMIT 1`).Scan(&key, &first); err != nil {
		t.Fatal(err)
	}
	keyed := func() storage.NewTask {
		return storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: []byte(`{}`), Priority: 1,
			IdempotencyKey: &key, Fingerprint: []byte("f")}
	}
	j := janitor.New(store, store, janitor.Config{BatchSize: 3}, quiet)
	if n, err := j.SweepOnce(ctx); err != nil || n != 20 {
		t.Fatalf("batch sweep deleted %d, %v; want q's and other's 20 tasks", n, err)
	}
	if got := reserved(); got != 4 {
		t.Errorf("after the batches, %d of q's keys reserved for the window, want 4", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM idempotency_keys`); got != 4 {
		t.Errorf("after the batches, %d keys, want q's 4 (other's window is 0)", got)
	}
	var dup *storage.DuplicateRequestError
	if _, err := store.Enqueue(ctx, "q", []storage.NewTask{keyed()}, nil); !errors.As(err, &dup) || dup.TaskID != first {
		t.Fatalf("enqueue with a reserved key: %v, want duplicate_request naming %s", err, first)
	}

	// Queue long lets its day go: the day leaves whole, its q tasks' keys reserved.
	exec(t, pool, `UPDATE queues SET retention = '{"done_ms": 3600000}' WHERE name = 'long'`)
	insertHistory(t, pool, "q", "done", 5, yesterday.Add(4*time.Hour), 5, nil)
	// The day expires once its end and an hour of retention have passed: from
	// midnight to 01:00 UTC the database's clock is not there yet, so this sweep
	// runs at least two hours into today (its keys' 7-day window is far off).
	dropClock := &testenv.Clock{}
	dropAt := time.Now()
	if earliest := yesterday.Add(26 * time.Hour); dropAt.Before(earliest) {
		dropAt = earliest
	}
	dropClock.Set(dropAt)
	dropStore := testenv.Clocked(store, dropClock)
	var dropped []janitor.Batch
	jd := janitor.New(dropStore, dropStore, janitor.Config{BatchSize: 3}, quiet)
	jd.OnBatch = func(b janitor.Batch) {
		if b.Dropped && b.Deleted > 0 {
			dropped = append(dropped, b)
		}
	}
	if _, err := jd.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(dropped) != 1 || dropped[0].Deleted != 6 {
		t.Fatalf("dropped %+v, want yesterday's done day with q's 5 tasks and long's 1", dropped)
	}
	if got := reserved(); got != 9 {
		t.Errorf("after the drop, %d of q's keys reserved for the window, want 9", got)
	}

	// Eight days on, the window has passed: a sweep deletes the keys, and the key
	// makes a new task again.
	clock := &testenv.Clock{}
	later := testenv.Clocked(store, clock)
	clock.SetAhead(t, store, 8*day)
	j = janitor.New(later, later, janitor.Config{BatchSize: 3}, quiet)
	if _, err := j.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := count(t, pool, `SELECT count(*) FROM idempotency_keys`); got != 0 {
		t.Fatalf("%d keys left after their window", got)
	}
	again, err := store.Enqueue(ctx, "q", []storage.NewTask{keyed()}, nil)
	if err != nil || len(again) != 1 || !again[0].Created || again[0].Task.ID == first {
		t.Fatalf("enqueue after the window: %+v, %v; want a new task", again, err)
	}
}

// TestWorkflowLeavesWholeBeforeItsDay: a finished workflow with a task in a day that
// expires leaves whole first, its dead step of another day too; a running
// workflow's task holds its day back until the workflow ends.
func TestWorkflowLeavesWholeBeforeItsDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	yesterday := today.AddDate(0, 0, -1)
	pool, store := historyClock(t, today.Add(7*day+12*time.Hour))
	workflow := func(status string) uuid.UUID {
		var id uuid.UUID
		if err := pool.QueryRow(ctx, `INSERT INTO workflows (id, name, status, steps_left, finished_at)
			VALUES (gen_random_uuid(), 'wf', $1, 0, CASE WHEN $1 <> 'running' THEN now() END) RETURNING id`, status).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	failed, running := workflow("failed"), workflow("running")
	insertHistory(t, pool, "q", "done", 3, yesterday.Add(time.Hour), 0, &failed)
	insertHistory(t, pool, "q", "dead", 1, today.Add(time.Hour), 0, &failed)
	insertHistory(t, pool, "q", "cancelled", 2, yesterday.Add(time.Hour), 0, &running)
	insertHistory(t, pool, "q", "done", 20, yesterday.Add(2*time.Hour), 0, nil)
	j := janitor.New(store, store, janitor.Config{}, quiet)
	if _, err := j.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	yday := "_p" + yesterday.Format("20060102")
	if exists(t, pool, "task_history_done"+yday) {
		t.Error("yesterday's done tasks were kept")
	}
	if n := count(t, pool, `SELECT count(*) FROM workflows WHERE id = $1`, failed) +
		count(t, pool, `SELECT count(*) FROM all_tasks WHERE workflow_id = $1`, failed); n != 0 {
		t.Errorf("%d rows of the failed workflow left, want it gone whole", n)
	}
	if !exists(t, pool, "task_history_cancelled"+yday) ||
		count(t, pool, `SELECT count(*) FROM task_history WHERE workflow_id = $1`, running) != 2 {
		t.Error("the running workflow's day was dropped under it")
	}
	// Once the workflow ends, its day goes, with it whole.
	exec(t, pool, `UPDATE workflows SET status = 'cancelled', finished_at = now() WHERE id = $1`, running)
	if _, err := j.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, pool, "task_history_cancelled"+yday) || count(t, pool, `SELECT count(*) FROM workflows`) != 0 {
		t.Error("the ended workflow's day was kept")
	}
}

// envDropBench, set to a number of tasks (1000000 for the figure in
// docs/benchmarks.md), runs TestDropDayOfHistoryBench; envDropBenchWindow sets queue
// q's idempotency window in ms (default 24 h: every key of the day, created now,
// stays reserved; 0: every key goes); envDropBenchVacuum=1 vacuums the day before the
// drop, as autovacuum's insert threshold would have long before a day expires
// (without it, the drop's first scan of the day sets every row's hint bits).
const (
	envDropBench       = "TASKFORGE_BENCH_HISTORY_DROP"
	envDropBenchWindow = "TASKFORGE_BENCH_HISTORY_DROP_WINDOW_MS"
	envDropBenchVacuum = "TASKFORGE_BENCH_HISTORY_DROP_VACUUM"
)

// TestDropDayOfHistoryBench measures a day of N finished tasks (each with one
// attempt, one in ten with an idempotency key) leaving by the janitor's drop: the
// time the detach and the drop take (the drop reserves the keys for their window, or
// deletes them), and that no dead row is left behind in history.
func TestDropDayOfHistoryBench(t *testing.T) {
	raw := os.Getenv(envDropBench)
	if raw == "" {
		t.Skipf("set %s=1000000 to measure dropping a day of history", envDropBench)
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a number of tasks", envDropBench, raw)
	}
	ctx := context.Background()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	yesterday := today.AddDate(0, 0, -1)
	pool, store := historyClock(t, today.Add(7*day+12*time.Hour))
	window := int64(86_400_000)
	if raw := os.Getenv(envDropBenchWindow); raw != "" {
		if window, err = strconv.ParseInt(raw, 10, 64); err != nil {
			t.Fatalf("%s=%q: want milliseconds", envDropBenchWindow, raw)
		}
	}
	exec(t, pool, `UPDATE queues SET idempotency_window_ms = $1 WHERE name = 'q'`, window)
	start := time.Now()
	for i := 0; i < n; i += 100_000 { // a day, in slices (one long INSERT would hold its snapshot)
		insertHistory(t, pool, "q", "done", min(100_000, n-i), yesterday.Add(time.Duration(i)*time.Millisecond), min(100_000, n-i)/10, nil)
	}
	insertHistory(t, pool, "q", "done", 1000, today.Add(time.Hour), 0, nil)
	if os.Getenv(envDropBenchVacuum) == "1" {
		exec(t, pool, `VACUUM (ANALYZE) task_history, attempt_history`)
	} else {
		exec(t, pool, `ANALYZE task_history, attempt_history`)
	}
	t.Logf("inserted %d tasks and their attempts in %s", n, time.Since(start).Round(time.Millisecond))

	var dropped []janitor.Batch
	reservedByDrop := 0 // freed by the same sweep, whose clock is past their window
	j := janitor.New(store, store, janitor.Config{BatchTimeout: time.Minute}, quiet)
	j.OnBatch = func(b janitor.Batch) {
		if b.Dropped && b.Deleted > 0 { // yesterday's other, empty, statuses go too
			dropped = append(dropped, b)
		}
		if b.Table == "idempotency_keys" {
			reservedByDrop += b.Deleted
		}
	}
	keys := count(t, pool, `SELECT count(*) FROM idempotency_keys`)
	start = time.Now()
	deleted, err := j.SweepOnce(ctx)
	sweep := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if deleted-reservedByDrop != n || len(dropped) != 1 || dropped[0].Deleted != n {
		t.Fatalf("deleted %d in %+v, want one day of %d", deleted, dropped, n)
	}
	yday := "_p" + yesterday.Format("20060102")
	if exists(t, pool, "task_history_done"+yday) || exists(t, pool, "attempt_history_done"+yday) {
		t.Fatal("the day's partitions are still there")
	}
	var dead int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables
		WHERE relname LIKE 'task_history%' OR relname LIKE 'attempt_history%'`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Errorf("%d dead rows in history after the drop", dead)
	}
	t.Logf("a day of %d tasks (and %d attempts, %d keys, window %d ms): the drop transaction took %s, the whole sweep (detach included, and the reservations the clock's 7 days have ended) %s; %d dead rows left in history; %d keys before, %d reserved by the drop",
		n, n, n/10, window, dropped[0].Duration.Round(time.Millisecond), sweep.Round(time.Millisecond), dead, keys, reservedByDrop)
}

// TestDroppedDayLeavesItsKeysReserved: a day of history that leaves whole does not
// touch its tasks' idempotency keys (no row updated, so no dead row), yet each stays
// reserved for its queue's window: an enqueue with one answers duplicate_request
// naming the dropped task. Once the window has ended the key is free: an enqueue takes
// it over, and the janitor deletes the others with the list the drop left. A key
// whose task still exists stays held past its window.
func TestDroppedDayLeavesItsKeysReserved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := setup(t) // enqueues run at the database's clock
	today := time.Now().UTC().Truncate(24 * time.Hour)
	yesterday := today.AddDate(0, 0, -1)
	exec(t, pool, `UPDATE queues SET idempotency_window_ms = 2592000000 WHERE name = 'q'`) // 30 days
	keyed := func(key string) storage.NewTask {
		return storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: []byte(`{}`), Priority: 1,
			IdempotencyKey: &key, Fingerprint: []byte("f")}
	}
	live, err := store.Enqueue(ctx, "q", []storage.NewTask{keyed("live")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	insertHistory(t, pool, "q", "done", 20, yesterday.Add(2*time.Hour), 5, nil)
	type keyRow struct {
		key, ctid, xmin string
		task            uuid.UUID
	}
	keyRows := func() []keyRow {
		rows, err := pool.Query(ctx, `SELECT key, ctid::text, xmin::text, task_id FROM idempotency_keys
			WHERE queue = 'q' AND key <> 'live' ORDER BY key`)
		if err != nil {
			t.Fatal(err)
		}
		var out []keyRow
		var r keyRow
		if _, err := pgx.ForEachRow(rows, []any{&r.key, &r.ctid, &r.xmin, &r.task}, func() error {
			out = append(out, r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := keyRows()
	if len(before) != 5 {
		t.Fatalf("%d keys of the day, want 5", len(before))
	}

	// Seven days and a half on, the default retention has passed the day whole; the
	// 30-day window has not.
	clock := &testenv.Clock{}
	clock.Set(today.Add(7*day + 12*time.Hour))
	later := testenv.Clocked(store, clock)
	var dropped []janitor.Batch
	j := janitor.New(later, later, janitor.Config{}, quiet)
	j.OnBatch = func(b janitor.Batch) {
		if b.Dropped && b.Deleted > 0 {
			dropped = append(dropped, b)
		}
	}
	if _, err := j.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(dropped) != 1 || dropped[0].Deleted != 20 {
		t.Fatalf("dropped %+v, want yesterday's 20 done tasks", dropped)
	}
	if after := keyRows(); !slices.Equal(after, before) {
		t.Errorf("the drop touched its keys' rows: before %v, after %v", before, after)
	}
	if got := count(t, pool, `SELECT count(*) FROM idempotency_key_drops, unnest(keys)`); got != 5 {
		t.Errorf("%d keys listed for the janitor, want the day's 5", got)
	}
	var dup *storage.DuplicateRequestError
	if _, err := store.Enqueue(ctx, "q", []storage.NewTask{keyed(before[0].key)}, nil); !errors.As(err, &dup) || dup.TaskID != before[0].task {
		t.Fatalf("enqueue with a dropped task's key within its window: %v, want duplicate_request naming %s", err, before[0].task)
	}

	// A window of 0 has ended for every key: the dropped task's key is free, the live
	// task's is not.
	exec(t, pool, `UPDATE queues SET idempotency_window_ms = 0 WHERE name = 'q'`)
	again, err := store.Enqueue(ctx, "q", []storage.NewTask{keyed(before[0].key)}, nil)
	if err != nil || len(again) != 1 || !again[0].Created || again[0].Task.ID == before[0].task {
		t.Fatalf("enqueue with a dropped task's key after its window: %+v, %v; want a new task", again, err)
	}
	same, err := store.Enqueue(ctx, "q", []storage.NewTask{keyed("live")}, nil)
	if err != nil || len(same) != 1 || same[0].Created || same[0].Task.ID != live[0].Task.ID {
		t.Fatalf("enqueue with a live task's key after its window: %+v, %v; want the task", same, err)
	}

	// Back to 30 days: 31 days on, the janitor deletes the day's other keys and their
	// list; the key taken over names its new task and stays.
	exec(t, pool, `UPDATE queues SET idempotency_window_ms = 2592000000 WHERE name = 'q'`)
	clock.SetAhead(t, store, 31*day)
	freed := 0
	j.OnBatch = func(b janitor.Batch) {
		if b.Table == "idempotency_keys" {
			freed += b.Deleted
		}
	}
	if _, err := j.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if freed != 4 {
		t.Errorf("the sweep freed %d keys, want the day's other 4", freed)
	}
	if got := count(t, pool, `SELECT count(*) FROM idempotency_keys WHERE queue = 'q'`); got != 2 {
		t.Errorf("%d keys of q left, want the live task's and the one taken over", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM idempotency_key_drops`); got != 0 {
		t.Errorf("%d lists of dropped keys left", got)
	}
}
