package backfill_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/internal/backfill"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testsignal"
	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/storage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// setup returns a migrated database with queues q and other, and its store.
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

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// insertOldRelease writes what a release without history left: n tasks in tasks
// over queues q and other, by i mod 8: done (3 of 8), cancelled, dead, pending,
// executing, retry; finished ones finished over the last four days. Each task has one
// attempt, and each dead one a second. It returns how many are finished.
func insertOldRelease(t *testing.T, pool *pgxpool.Pool, n int) int64 {
	t.Helper()
	exec(t, pool, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
			created_at, updated_at, finished_at, lease_token, lease_expires_at, claimed_by)
		SELECT gen_random_uuid(), CASE WHEN i % 2 = 0 THEN 'q' ELSE 'other' END, jsonb_build_object('i', i), 5, s,
			now() - interval '5 days', CASE WHEN s = 'dead' THEN 2 ELSE 1 END, 3,
			now() - interval '5 days', now() - (i % 4) * interval '1 day',
			CASE WHEN s IN ('done', 'cancelled', 'dead') THEN now() - (i % 4) * interval '1 day' END,
			CASE WHEN s = 'executing' THEN gen_random_uuid() END,
			CASE WHEN s = 'executing' THEN now() + interval '1 hour' END,
			CASE WHEN s = 'executing' THEN 'w' END
		FROM generate_series(1, $1::int) AS i,
			LATERAL (SELECT (ARRAY['done', 'done', 'done', 'cancelled', 'dead', 'pending', 'executing', 'retry'])[1 + i % 8] AS s) st`, n)
	exec(t, pool, `INSERT INTO attempts (task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at)
		SELECT t.id, a, t.queue, 'w', gen_random_uuid(),
			CASE WHEN t.status = 'done' THEN 'succeeded' WHEN t.status = 'executing' THEN 'executing'
				WHEN t.status = 'cancelled' THEN 'cancelled' ELSE 'failed' END,
			t.created_at, CASE WHEN t.status <> 'executing' THEN t.updated_at END
		FROM tasks t, generate_series(1, t.attempts) AS a`)
	return count(t, pool, `SELECT count(*) FROM tasks WHERE status IN ('done', 'cancelled', 'dead')`)
}

// snapshot is what must hold across a move: every task and attempt, once, in tasks
// and attempts or in history.
type snapshot struct {
	tasks, attempts, finished, finishedAttempts int64
}

func take(t *testing.T, pool *pgxpool.Pool) snapshot {
	t.Helper()
	return snapshot{
		tasks:            count(t, pool, `SELECT count(*) FROM all_tasks`),
		attempts:         count(t, pool, `SELECT count(*) FROM all_attempts`),
		finished:         count(t, pool, `SELECT count(*) FROM all_tasks WHERE status IN ('done', 'cancelled', 'dead')`),
		finishedAttempts: count(t, pool, `SELECT count(*) FROM all_attempts a JOIN all_tasks t ON t.id = a.task_id WHERE t.status IN ('done', 'cancelled', 'dead')`),
	}
}

// checkMoved asserts that every finished task of before is in history once, with
// its attempts, every other task still in tasks, nothing twice, and the tally exact.
func checkMoved(t *testing.T, pool *pgxpool.Pool, before snapshot) {
	t.Helper()
	if n := count(t, pool, `SELECT count(*) FROM tasks WHERE status IN ('done', 'cancelled', 'dead')`); n != 0 {
		t.Errorf("%d finished tasks left in tasks", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM tasks`); n != before.tasks-before.finished {
		t.Errorf("tasks holds %d rows, want the %d unfinished", n, before.tasks-before.finished)
	}
	if n := count(t, pool, `SELECT count(*) FROM task_history`); n != before.finished {
		t.Errorf("task_history holds %d rows, want %d", n, before.finished)
	}
	if n := count(t, pool, `SELECT count(DISTINCT id) FROM all_tasks`); n != before.tasks {
		t.Errorf("%d distinct tasks in all, want %d", n, before.tasks)
	}
	if n := count(t, pool, `SELECT count(*) FROM attempt_history`); n != before.finishedAttempts {
		t.Errorf("attempt_history holds %d rows, want %d", n, before.finishedAttempts)
	}
	if n := count(t, pool, `SELECT count(*) FROM attempts`); n != before.attempts-before.finishedAttempts {
		t.Errorf("attempts holds %d rows, want %d", n, before.attempts-before.finishedAttempts)
	}
	// Each attempt in history carries its task's status and finished_at, and sits
	// in the day partition of its task.
	if n := count(t, pool, `SELECT count(*) FROM attempt_history a JOIN task_history h ON h.id = a.task_id
		WHERE a.task_status = h.status AND a.task_finished_at = h.finished_at`); n != before.finishedAttempts {
		t.Errorf("%d attempts in history match their task, want %d", n, before.finishedAttempts)
	}
	if n := count(t, pool, `SELECT count(*) FROM task_history WHERE tableoid::regclass::text LIKE '%default'`); n != 0 {
		t.Errorf("%d moved tasks landed in a default partition, not their day's", n)
	}
	// The tally (folded and not) says what the tables hold.
	if n := count(t, pool, `SELECT count(*) FROM (
			SELECT queue, status, count(*) AS n FROM all_tasks GROUP BY 1, 2
		) c FULL JOIN (
			SELECT queue, metric AS status, sum(n) AS n FROM (
				SELECT queue, metric, n FROM queue_tally WHERE bucket = '-infinity'
				UNION ALL SELECT queue, metric, delta FROM queue_tally_delta WHERE bucket = '-infinity'
			) x GROUP BY 1, 2 HAVING sum(n) <> 0
		) k USING (queue, status)
		WHERE c.n IS DISTINCT FROM k.n`); n != 0 {
		t.Errorf("the tally differs from the tables in %d (queue, status)", n)
	}
}

// TestMoveAllMovesFinishedTasksOnly: the finished tasks of an old release move into
// history (their day partitions, created first) with their attempts, in batches;
// unfinished ones stay; nothing is lost or doubled; the counts stay exact; and a
// second run has nothing to do.
func TestMoveAllMovesFinishedTasksOnly(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	finished := insertOldRelease(t, pool, 2000)
	before := take(t, pool)
	blocks := count(t, pool, `SELECT pg_relation_size('tasks') / current_setting('block_size')::int8`)
	var batches []backfill.Progress
	m := backfill.New(store, backfill.Config{BatchBlocks: 3, OnBatch: func(p backfill.Progress) { batches = append(batches, p) }}, quiet)
	p, err := m.MoveAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkMoved(t, pool, before)
	if p.Total != finished || p.Moved != finished || p.Left != 0 || p.Attempts != before.finishedAttempts {
		t.Errorf("progress %+v, want %d moved of %d with %d attempts", p, finished, finished, before.finishedAttempts)
	}
	if want := int((blocks + 2) / 3); len(batches) != want || want < 5 {
		t.Errorf("%d batches, want %d (%d blocks by 3)", len(batches), want, blocks)
	}
	for i := 1; i < len(batches); i++ {
		if batches[i].Moved < batches[i-1].Moved || batches[i].Left > batches[i-1].Left {
			t.Errorf("batch %d went back: %+v after %+v", i, batches[i], batches[i-1])
		}
	}
	if p.String() == "" || p.Rate() <= 0 {
		t.Errorf("no progress line or rate: %q %v", p.String(), p.Rate())
	}
	again, err := m.MoveAll(context.Background())
	if err != nil || again.Total != 0 || again.Batches != 0 {
		t.Errorf("second run: %+v, %v; want nothing to do", again, err)
	}
}

// TestMoveAllResumesAfterACrash: a run stopped between batches (a crash) leaves
// every task exactly once, in tasks or in history, and the next run finishes.
func TestMoveAllResumesAfterACrash(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	insertOldRelease(t, pool, 1000)
	before := take(t, pool)
	ctx, cancel := context.WithCancel(context.Background())
	m := backfill.New(store, backfill.Config{BatchBlocks: 2, OnBatch: func(p backfill.Progress) {
		if p.Batches == 3 {
			cancel()
		}
	}}, quiet)
	p, err := m.MoveAll(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped run: %v, want context.Canceled", err)
	}
	if p.Moved == 0 || p.Moved >= before.finished {
		t.Fatalf("stopped run moved %d of %d: not midway", p.Moved, before.finished)
	}
	if n := count(t, pool, `SELECT count(*) FROM all_tasks`); n != before.tasks {
		t.Errorf("midway: %d tasks in tasks and history, want %d", n, before.tasks)
	}
	if n := count(t, pool, `SELECT count(*) FROM task_history`); n != p.Moved {
		t.Errorf("midway: history holds %d, the run said %d", n, p.Moved)
	}
	rest, err := backfill.New(store, backfill.Config{BatchBlocks: 2}, quiet).MoveAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rest.Total != before.finished-p.Moved || rest.Moved != rest.Total {
		t.Errorf("rerun %+v, want the %d left", rest, before.finished-p.Moved)
	}
	checkMoved(t, pool, before)
}

// TestRunWaitsOutHeldRows: a finished task that another transaction holds through a
// whole pass stays (SKIP LOCKED: the mover never waits on the live queue); Run says
// so, takes it on a later run once it is free, and keeps running (finding nothing)
// until its context ends.
func TestRunWaitsOutHeldRows(t *testing.T) {
	t.Parallel()
	pool, store := setup(t)
	insertOldRelease(t, pool, 400)
	before := take(t, pool)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT id FROM tasks WHERE status = 'dead' ORDER BY id LIMIT 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var runs testsignal.Signal[backfill.Run]
	runs.Init()
	m := backfill.New(store, backfill.Config{BatchBlocks: 2, Interval: time.Millisecond, OnRun: runs.Signal}, quiet)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	first := runs.WaitOrTimeout(t, "the first run")
	if !errors.Is(first.Err, backfill.ErrRowsHeld) || first.Progress.Left != 1 || first.Progress.Moved != before.finished-1 {
		t.Fatalf("first run: %+v, %v; want all but the held row moved, ErrRowsHeld", first.Progress, first.Err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		r := runs.WaitOrTimeout(t, "a run after the row was freed")
		if r.Err == nil {
			if r.Progress.Moved != 1 || r.Progress.Left != 0 {
				t.Errorf("run after the row was freed: %+v, want that row moved", r.Progress)
			}
			break
		}
		if !errors.Is(r.Err, backfill.ErrRowsHeld) {
			t.Fatal(r.Err)
		}
	}
	if r := runs.WaitOrTimeout(t, "a run with nothing left"); r.Err != nil || r.Progress.Total != 0 {
		t.Errorf("run with nothing left: %+v, %v", r.Progress, r.Err)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testsignal.Timeout):
		t.Fatal("Run did not return when its context ended")
	}
	checkMoved(t, pool, before)
}

// finishedIndexes are the indexes of tasks that only its finished rows need, as a
// release before migration 0027 had them.
var finishedIndexes = map[string]string{
	"tasks_dead_idx":        `CREATE INDEX tasks_dead_idx ON tasks (queue, finished_at DESC, id DESC) WHERE status = 'dead'`,
	"tasks_finished_idx":    `CREATE INDEX tasks_finished_idx ON tasks (finished_at) WHERE status IN ('done', 'cancelled')`,
	"tasks_idempotency_idx": `CREATE UNIQUE INDEX tasks_idempotency_idx ON tasks (queue, idempotency_key) WHERE idempotency_key IS NOT NULL`,
}

func indexesLeft(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	return count(t, pool, `SELECT count(*) FROM pg_indexes WHERE tablename = 'tasks'
		AND indexname IN ('tasks_dead_idx', 'tasks_finished_idx', 'tasks_idempotency_idx')`)
}

// TestFinishedIndexesGoOnceNoFinishedTaskIsLeft: migration 0027 drops tasks' indexes
// of finished rows on a database whose tasks holds none, and keeps them on one that
// still holds an older release's finished tasks; the mover keeps them while it
// moves, drops them once none is left, and a later run has none to drop.
func TestFinishedIndexesGoOnceNoFinishedTaskIsLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := setup(t)
	if n := indexesLeft(t, pool); n != 0 {
		t.Fatalf("a new database has %d of the indexes of finished tasks, want none", n)
	}
	// An upgraded database: the indexes and finished tasks of a release before 0027,
	// which then applies.
	for _, ddl := range finishedIndexes {
		exec(t, pool, ddl)
	}
	insertOldRelease(t, pool, 400)
	exec(t, pool, `DELETE FROM taskforge_migrations WHERE version = 27`)
	if applied, err := migrations.Apply(ctx, pool); err != nil || len(applied) != 1 || applied[0] != 27 {
		t.Fatalf("migrations applied %v, %v; want [27]", applied, err)
	}
	if n := indexesLeft(t, pool); n != 3 {
		t.Fatalf("0027 left %d of the 3 indexes of finished tasks beside finished rows", n)
	}
	before := take(t, pool)
	var during []int64
	m := backfill.New(store, backfill.Config{BatchBlocks: 2, OnBatch: func(backfill.Progress) {
		during = append(during, indexesLeft(t, pool))
	}}, quiet)
	p, err := m.MoveAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkMoved(t, pool, before)
	for i, n := range during {
		if n != 3 {
			t.Fatalf("batch %d: %d of the 3 indexes left while finished tasks were", i, n)
		}
	}
	if want := []string{"tasks_dead_idx", "tasks_finished_idx", "tasks_idempotency_idx"}; !slices.Equal(p.IndexesDropped, want) {
		t.Errorf("dropped %v, want %v", p.IndexesDropped, want)
	}
	if n := indexesLeft(t, pool); n != 0 {
		t.Errorf("%d of the indexes of finished tasks left after the move", n)
	}
	again, err := m.MoveAll(ctx)
	if err != nil || len(again.IndexesDropped) != 0 {
		t.Errorf("second run: dropped %v, %v; want nothing", again.IndexesDropped, err)
	}
	// A database already drained when 0027 applies loses them in the migration.
	for _, ddl := range finishedIndexes {
		exec(t, pool, ddl)
	}
	exec(t, pool, `DELETE FROM taskforge_migrations WHERE version = 27`)
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if n := indexesLeft(t, pool); n != 0 {
		t.Errorf("0027 on a drained database left %d of the indexes of finished tasks", n)
	}
}
