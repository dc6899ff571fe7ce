package janitor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/internal/janitor"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testsignal"
	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/storage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// setup returns a migrated database with queues q and other.
func setup(t *testing.T) (*pgxpool.Pool, *storage.Store) {
	t.Helper()
	ctx := context.Background()
	pool, err := storage.Connect(ctx, testenv.NewDatabase(t), 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `INSERT INTO queues (name) VALUES ('q'), ('other')`)
	return pool, storage.New(pool)
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// insertFinished inserts n tasks spread over queues q and other (one in ten
// cancelled, the rest done, each with one attempt) that were created created ago
// and finished finished ago, and returns nothing: the tests count by status and age.
func insertFinished(t *testing.T, pool *pgxpool.Pool, n int, created, finished time.Duration) {
	t.Helper()
	exec(t, pool, `WITH ins AS (
		INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, attempts,
			created_at, updated_at, finished_at)
		SELECT gen_random_uuid(), CASE WHEN i % 5 = 0 THEN 'other' ELSE 'q' END,
			jsonb_build_object('i', i), 1 + i % 10,
			CASE WHEN i % 10 = 1 THEN 'cancelled' ELSE 'done' END,
			now() - $2 * interval '1 ms', 3, 1,
			now() - $2 * interval '1 ms', now() - $3 * interval '1 ms', now() - $3 * interval '1 ms'
		FROM generate_series(1, $1::int) AS i
		RETURNING id, queue, created_at, finished_at
	)
	INSERT INTO attempts (task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at)
	SELECT id, 1, queue, 'w', gen_random_uuid(), 'succeeded', created_at, finished_at FROM ins`,
		n, created.Milliseconds(), finished.Milliseconds())
}

const day = 24 * time.Hour

// TestSweepDeletesOldFinishedTasksInShortBatches: 50,000 done and cancelled tasks
// finished 8 days ago go, at most 500 rows per statement (so each lock is held for
// one short batch), while a prober locks those very rows throughout. Tasks finished 6 days ago (even if created long ago), dead tasks, unfinished
// tasks and a worker seen recently stay, with their attempts.
func TestSweepDeletesOldFinishedTasksInShortBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := setup(t)
	const old = 50_000
	start := time.Now()
	insertFinished(t, pool, old, 9*day, 8*day)
	t.Logf("inserted %d old tasks and attempts in %s", old, time.Since(start).Round(time.Millisecond))

	// Kept: finished inside the retention (one created 20 days ago), dead for a month,
	// unfinished though created long ago, and a recently seen worker.
	insertFinished(t, pool, 300, 20*day, 6*day)
	exec(t, pool, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries,
		attempts, created_at, updated_at, finished_at)
	SELECT gen_random_uuid(), 'q', '{}', 5, s, now() - interval '30 days', 3, 1,
		now() - interval '30 days', now() - interval '30 days',
		CASE WHEN s = 'dead' THEN now() - interval '30 days' END
	FROM unnest(ARRAY['dead', 'dead', 'pending', 'claimed', 'executing', 'retry']) AS s`)
	exec(t, pool, `INSERT INTO attempts (task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at)
		SELECT id, 1, queue, 'w', gen_random_uuid(), 'failed', created_at, created_at FROM tasks WHERE status = 'dead'`)
	exec(t, pool, `INSERT INTO workers (id, last_heartbeat_at) VALUES
		('gone', now() - interval '8 days'), ('alive', now() - interval '1 hour')`)
	keptTasks := count(t, pool, `SELECT count(*) FROM tasks`) - old
	keptAttempts := count(t, pool, `SELECT count(*) FROM attempts`) - old

	// The prober locks old rows, one at a time in autocommit, while the sweep runs:
	// each lock waits at most for the one batch that holds the row.
	oldIDs := ids(t, pool, `SELECT id FROM tasks WHERE finished_at < now() - interval '7 days' ORDER BY created_at`)
	var probes atomic.Int64
	var longestProbe atomic.Int64
	probeCtx, stopProbe := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; probeCtx.Err() == nil; i = (i + 997) % len(oldIDs) {
			start := time.Now()
			var got uuid.UUID
			err := pool.QueryRow(probeCtx, `SELECT id FROM tasks WHERE id = $1 FOR UPDATE`, oldIDs[i]).Scan(&got)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				if probeCtx.Err() == nil {
					t.Errorf("probe: %v", err)
				}
				return
			}
			probes.Add(1)
			if d := time.Since(start); d > time.Duration(longestProbe.Load()) {
				longestProbe.Store(int64(d))
			}
		}
	}()

	j := janitor.New(store, store, janitor.Config{}, quiet) // the defaults: 7 days, 500 rows
	var batches []janitor.Batch
	j.OnBatch = func(b janitor.Batch) { batches = append(batches, b) }
	sweepStart := time.Now()
	deleted, err := j.SweepOnce(ctx)
	elapsed := time.Since(sweepStart)
	stopProbe()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// A row the prober held at the instant its batch ran was skipped (SKIP LOCKED),
	// as it should be; the next sweep takes it.
	extra, err := j.SweepOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if extra > 5 {
		t.Errorf("the follow-up sweep deleted %d rows: more than the prober could have held", extra)
	}
	deleted += extra

	var longest, total time.Duration
	taskBatches := 0
	for _, b := range batches {
		total += b.Duration
		longest = max(longest, b.Duration)
		if b.Table == "tasks" {
			taskBatches++
		}
		if b.Deleted > 500 {
			t.Errorf("a batch deleted %d rows, want at most 500", b.Deleted)
		}
	}
	t.Logf("swept %d rows in %s: %d batches, longest %s, mean %s, %.0f tasks/s; %d lock probes, longest wait %s",
		deleted, elapsed.Round(time.Millisecond), len(batches), longest.Round(time.Microsecond),
		(total / time.Duration(len(batches))).Round(time.Microsecond), float64(old)/elapsed.Seconds(),
		probes.Load(), time.Duration(longestProbe.Load()).Round(time.Microsecond))

	if deleted != old+1 {
		t.Errorf("SweepOnce deleted %d rows, want %d (%d tasks and 1 worker)", deleted, old+1, old)
	}
	if taskBatches < old/500 {
		t.Errorf("%d task batches, want at least %d (500 rows each)", taskBatches, old/500)
	}
	// How long a batch and a probe's lock wait took is logged above, not asserted:
	// on a loaded box a 500-row batch once took 6.9 s. What bounds both is the
	// batch's size, asserted above for every batch.
	if probes.Load() < 10 {
		t.Errorf("only %d probes ran during the sweep", probes.Load())
	}
	if got := count(t, pool, `SELECT count(*) FROM tasks`); got != keptTasks {
		t.Errorf("%d tasks left, want %d", got, keptTasks)
	}
	if got := count(t, pool, `SELECT count(*) FROM attempts`); got != keptAttempts {
		t.Errorf("%d attempts left, want %d (the deleted tasks' attempts must go with them)", got, keptAttempts)
	}
	if got := count(t, pool, `SELECT count(*) FROM attempts a WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE id = a.task_id)`); got != 0 {
		t.Errorf("%d orphan attempts", got)
	}
	for status, want := range map[string]int{"dead": 2, "pending": 1, "claimed": 1, "executing": 1, "retry": 1, "done": 270, "cancelled": 30} {
		if got := count(t, pool, `SELECT count(*) FROM tasks WHERE status = $1`, status); got != want {
			t.Errorf("%d %s tasks left, want %d", got, status, want)
		}
	}
	if got := count(t, pool, `SELECT count(*) FROM workers WHERE id = 'alive'`); got != 1 {
		t.Error("the recently seen worker was deleted")
	}
	if got := count(t, pool, `SELECT count(*) FROM workers WHERE id = 'gone'`); got != 0 {
		t.Error("the worker silent for 8 days was kept")
	}

	// A second sweep finds nothing.
	if n, err := j.SweepOnce(ctx); err != nil || n != 0 {
		t.Errorf("second sweep deleted %d, %v; want 0, nil", n, err)
	}
}

func ids(t *testing.T, pool *pgxpool.Pool, sql string) []uuid.UUID {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConcurrentJanitorsDeleteEachRowOnce: three janitors sweeping the same rows
// at once (as on three replicas) delete them all between them, none twice, and
// none fails on another's locks.
func TestConcurrentJanitorsDeleteEachRowOnce(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	const n = 6000
	insertFinished(t, pool, n, 9*day, 8*day)
	var wg sync.WaitGroup
	var total atomic.Int64
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := janitor.New(store, store, janitor.Config{BatchSize: 100}, quiet)
			for {
				deleted, err := j.SweepOnce(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				total.Add(int64(deleted))
				if deleted == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := total.Load(); got != n {
		t.Errorf("the janitors deleted %d tasks between them, want %d", got, n)
	}
	if got := count(t, pool, `SELECT count(*) FROM tasks`); got != 0 {
		t.Errorf("%d tasks left", got)
	}
}

// TestRunSweepsEveryIntervalAndStopsWithContext: Run deletes what expires while it
// runs, honours a custom retention, and returns nil promptly once its context ends.
func TestRunSweepsEveryIntervalAndStopsWithContext(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	insertFinished(t, pool, 100, 3*time.Hour, 2*time.Hour)
	insertFinished(t, pool, 10, 3*time.Hour, 30*time.Minute) // inside a 1 h retention
	var sweeps testsignal.Signal[janitor.Sweep]
	sweeps.Init()
	j := janitor.New(store, store, janitor.Config{Retention: time.Hour, Interval: 50 * time.Millisecond, OnSweep: sweeps.Signal}, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()

	if sw := sweeps.WaitOrTimeout(t, "the first sweep"); sw.Err != nil || sw.Deleted < 100 {
		t.Fatalf("first sweep: deleted %d (%v), want at least the 100 expired tasks", sw.Deleted, sw.Err)
	}
	if n := count(t, pool, `SELECT count(*) FROM tasks`); n != 10 {
		t.Fatalf("%d tasks left after the first sweep, want the 10 inside the retention", n)
	}
	// Work that expires later goes at a later sweep: the first to start after it.
	insertFinished(t, pool, 50, 3*time.Hour, 2*time.Hour)
	sweeps.Drain()
	sweeps.WaitOrTimeout(t, "a sweep that may have begun before the insert")
	sweeps.WaitOrTimeout(t, "a sweep that began after the insert")
	if n := count(t, pool, `SELECT count(*) FROM tasks`); n != 10 {
		t.Fatalf("%d tasks left after a later sweep, want 10", n)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestBatchTimeoutBoundsAStuckBatch: a batch that would wait on a lock (here a
// table lock held by another transaction) fails after BatchTimeout instead of
// queueing behind it, and SweepOnce reports the error.
func TestBatchTimeoutBoundsAStuckBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := setup(t)
	insertFinished(t, pool, 10, 9*day, 8*day)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE tasks IN SHARE MODE`); err != nil { // blocks DELETE
		t.Fatal(err)
	}
	j := janitor.New(store, store, janitor.Config{BatchTimeout: 200 * time.Millisecond}, quiet)
	start := time.Now()
	_, err = j.SweepOnce(ctx)
	took := time.Since(start)
	if err == nil {
		t.Fatal("SweepOnce succeeded through a conflicting table lock")
	}
	if took > 3*time.Second {
		t.Errorf("SweepOnce took %s to give up, want about 200ms", took)
	}
	t.Logf("gave up after %s: %v", took.Round(time.Millisecond), err)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The sweep after the lock runs with the default timeout: 200 ms bounds the stuck
	// batch above, but an unhindered sweep on a loaded CI machine can take longer
	// (the history delete releases idempotency keys as it goes).
	again := janitor.New(store, store, janitor.Config{}, quiet)
	if n, err := again.SweepOnce(ctx); err != nil || n != 10 {
		t.Errorf("after the lock: deleted %d, %v; want 10, nil", n, err)
	}
}

// TestSweepDeletesExpiredAuditEntries: audit entries older than AuditRetention go,
// in batches, oldest first; younger ones stay, and so do tasks the task retention
// keeps.
func TestSweepDeletesExpiredAuditEntries(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	ctx := context.Background()
	for i := range 25 {
		if err := store.InsertAudit(ctx, storage.AuditEntry{Actor: "alice", Via: "open", RemoteAddr: "127.0.0.1",
			Method: "PATCH", Route: "/queues/:name", Status: 200, Request: []byte(fmt.Sprintf(`{"i": %d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	// The first 20 are 91 days old: past the default 90-day retention.
	exec(t, pool, `UPDATE audit_log SET at = now() - interval '91 days' WHERE id <= 20`)
	insertFinished(t, pool, 5, 10*24*time.Hour, 8*24*time.Hour) // past the 7-day task retention
	var batches []janitor.Batch
	j := janitor.New(store, store, janitor.Config{BatchSize: 8}, quiet)
	j.OnBatch = func(b janitor.Batch) {
		if b.Table == "audit_log" {
			batches = append(batches, b)
		}
	}
	deleted, err := j.SweepOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if deleted != 25 { // 20 entries and 5 tasks
		t.Errorf("deleted %d rows, want 25", deleted)
	}
	if got := count(t, pool, `SELECT count(*) FROM audit_log`); got != 5 {
		t.Errorf("%d audit entries left, want the 5 young ones", got)
	}
	if got := count(t, pool, `SELECT min(id) FROM audit_log`); got != 21 {
		t.Errorf("oldest entry left is %d, want 21", got)
	}
	if len(batches) != 3 || batches[0].Deleted != 8 || batches[2].Deleted != 4 {
		t.Errorf("audit batches %+v, want 8, 8, 4", batches)
	}
}

// TestSweepFollowsEachQueuesRetention: each queue's own ages decide, per final
// status; what a queue does not set follows Config.Retention for done and cancelled
// and keeps dead tasks forever; null keeps forever.
func TestSweepFollowsEachQueuesRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := setup(t)
	exec(t, pool, `INSERT INTO queues (name, retention) VALUES
		('short', '{"done_ms": 3600000, "dead_ms": 86400000}'),
		('forever', '{"done_ms": null, "cancelled_ms": null}')`)
	// Every queue gets one task of each final status per age.
	exec(t, pool, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries,
		attempts, created_at, updated_at, finished_at)
	SELECT gen_random_uuid(), q, jsonb_build_object('age_h', h), 1, s, now() - h * interval '1 hour', 3, 1,
		now() - h * interval '1 hour', now() - h * interval '1 hour', now() - h * interval '1 hour'
	FROM unnest(ARRAY['q', 'short', 'forever']) AS q, unnest(ARRAY['done', 'cancelled', 'dead']) AS s,
		unnest(ARRAY[2, 30, 200]) AS h`)
	j := janitor.New(store, store, janitor.Config{Retention: 24 * time.Hour}, quiet)
	if _, err := j.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	left := func(queue, status string) []int {
		rows, err := pool.Query(ctx, `SELECT (payload->>'age_h')::int FROM tasks WHERE queue = $1 AND status = $2 ORDER BY 1`, queue, status)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		queue, status string
		want          []int // ages in hours still kept
	}{
		{"q", "done", []int{2}}, {"q", "cancelled", []int{2}}, {"q", "dead", []int{2, 30, 200}},
		{"short", "done", nil}, {"short", "cancelled", []int{2}}, {"short", "dead", []int{2}},
		{"forever", "done", []int{2, 30, 200}}, {"forever", "cancelled", []int{2, 30, 200}}, {"forever", "dead", []int{2, 30, 200}},
	} {
		if got := left(tc.queue, tc.status); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s %s tasks kept: ages %v h, want %v h", tc.queue, tc.status, got, tc.want)
		}
	}
}

// TestWorkflowGoesWholeWhenItsLastTaskExpires: a finished workflow with steps in two
// queues stays while one step's queue still keeps it, then goes with all its tasks.
func TestWorkflowGoesWholeWhenItsLastTaskExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := setup(t)
	exec(t, pool, `INSERT INTO queues (name, retention) VALUES ('short', '{"done_ms": 3600000}'), ('long', '{"done_ms": 86400000}')`)
	var wf uuid.UUID
	if err := pool.QueryRow(ctx, `INSERT INTO workflows (id, name, status, steps_left, finished_at)
		VALUES (gen_random_uuid(), 'wf', 'succeeded', 0, now() - interval '2 hours') RETURNING id`).Scan(&wf); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries,
		attempts, created_at, updated_at, finished_at, workflow_id)
	SELECT gen_random_uuid(), q, '{}', 1, 'done', now() - interval '3 hours', 3, 1,
		now() - interval '3 hours', now() - interval '2 hours', now() - interval '2 hours', $1
	FROM unnest(ARRAY['short', 'long']) AS q`, wf)
	j := janitor.New(store, store, janitor.Config{}, quiet)
	if _, err := j.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM tasks WHERE workflow_id = $1`, wf); n != 2 {
		t.Fatalf("%d of the workflow's 2 tasks kept while queue long keeps its step", n)
	}
	exec(t, pool, `UPDATE tasks SET finished_at = now() - interval '25 hours', created_at = now() - interval '26 hours' WHERE queue = 'long'`)
	if _, err := j.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM tasks WHERE workflow_id = $1`, wf) + count(t, pool, `SELECT count(*) FROM workflows WHERE id = $1`, wf); n != 0 {
		t.Fatalf("%d rows of the expired workflow left, want it gone whole", n)
	}
}
