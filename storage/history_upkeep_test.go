package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/storage"
)

// upkeepLock is the advisory lock of history's partition upkeep (migration 0018).
const upkeepLock = 7380998011216356210

// upkeepDay is a day no migration made partitions for: rows of it go to the defaults.
var upkeepDay = time.Date(2031, 3, 7, 0, 0, 0, 0, time.UTC)

// upkeepStore returns a migrated database with queue q and a Store whose clock reads
// noon of upkeepDay, so that its upkeep makes that day's partitions.
func upkeepStore(t *testing.T) (*pgxpool.Pool, *storage.Store) {
	t.Helper()
	_, pool := testenv.NewMigratedDatabase(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO queues (name) VALUES ('q')`); err != nil {
		t.Fatal(err)
	}
	return pool, storage.New(pool, storage.WithClock(func() time.Time { return upkeepDay.Add(12 * time.Hour) }))
}

// Rows of a done task finished at noon of upkeepDay, as a move writes them: the task
// into task_history, its attempt into attempt_history (each routed to its default).
const (
	insertHistoryTask = `INSERT INTO task_history (id, queue, payload, priority, status, scheduled_at,
		max_retries, finished_at) VALUES (gen_random_uuid(), 'q', '{}', 5, 'done', $1, 3, $1)`
	insertHistoryAttempt = `INSERT INTO attempt_history (task_id, attempt, queue, worker_id, lease_token,
		status, started_at, finished_at, task_status, task_finished_at)
		VALUES (gen_random_uuid(), 1, 'q', 'w', gen_random_uuid(), 'succeeded', $1, $1, 'done', $1)`
)

// waitForLockWaits waits until n backends of the database other than except wait for
// a lock.
func waitForLockWaits(t *testing.T, pool *pgxpool.Pool, n int, except uint32, what string) {
	t.Helper()
	testserver.Eventually(t, 20*time.Second, what, func() bool {
		var waiting int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> $1`, int64(except)).Scan(&waiting)
		return waiting >= n
	})
}

// wantDayMoved fails unless the day's tasks and attempts are all in its partitions.
func wantDayMoved(t *testing.T, pool *pgxpool.Pool, tasks, attempts int) {
	t.Helper()
	var inDefaults, inTasks, inAttempts int
	if err := pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM task_history_done_default) + (SELECT count(*) FROM attempt_history_done_default),
		(SELECT count(*) FROM task_history_done_p20310307), (SELECT count(*) FROM attempt_history_done_p20310307)`).
		Scan(&inDefaults, &inTasks, &inAttempts); err != nil {
		t.Fatal(err)
	}
	if inDefaults != 0 || inTasks != tasks || inAttempts != attempts {
		t.Errorf("%d rows left in the defaults, %d tasks and %d attempts in the day's partitions; want 0, %d, %d",
			inDefaults, inTasks, inAttempts, tasks, attempts)
	}
}

// TestHistoryUpkeepBesideAMove: the upkeep makes a day's partitions, moving its rows
// out of the defaults, while a transaction moving a task of that day into history
// holds one default and then wants the other, in either order. Until 0029 the
// upkeep held task_history_done_default (its ATTACH) while waiting for
// attempt_history_done_default, and a move that had written its attempt first
// waited on the first while holding the second: "deadlock detected". Now the upkeep
// never waits while holding a default, whatever order it takes them in: the move
// goes through, then the upkeep, and every row ends in the day's partitions.
func TestHistoryUpkeepBesideAMove(t *testing.T) {
	t.Parallel()
	for name, order := range map[string][2]string{
		"attempt first": {insertHistoryAttempt, insertHistoryTask},
		"task first":    {insertHistoryTask, insertHistoryAttempt},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			upkeepBesideAMove(t, order)
		})
	}
}

func upkeepBesideAMove(t *testing.T, order [2]string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, store := upkeepStore(t)
	noon := upkeepDay.Add(12 * time.Hour)
	seedDefaultDay(ctx, t, pool, noon)

	move, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = move.Rollback(context.Background()) }()
	var movePID uint32
	if err := move.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&movePID); err != nil {
		t.Fatal(err)
	}
	if _, err := move.Exec(ctx, order[0], noon); err != nil {
		t.Fatal(err)
	}

	upkeep := make(chan error, 1)
	go func() {
		_, err := store.EnsureHistoryPartitions(ctx, 0)
		upkeep <- err
	}()
	waitForLockWaits(t, pool, 1, movePID, "the upkeep to wait for the move's default")
	if _, err := move.Exec(ctx, order[1], noon); err != nil {
		t.Fatalf("the move's second row beside the upkeep: %v", err)
	}
	if err := move.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-upkeep; err != nil {
		t.Fatalf("upkeep beside a move: %v", err)
	}
	wantDayMoved(t, pool, 2, 2)
}

// TestHistoryUpkeepOfTwoReplicasAtOnce: two replicas' upkeeps start together while
// the defaults hold rows of a day that has no partitions. Until 0029 each read the
// defaults (ACCESS SHARE, held to the end) before taking the upkeep's advisory lock,
// so the one that got the lock waited in its ATTACH on the other, which waited on
// the advisory lock: "deadlock detected". Now both succeed, one making the day.
func TestHistoryUpkeepOfTwoReplicasAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, store := upkeepStore(t)
	noon := upkeepDay.Add(12 * time.Hour)
	seedDefaultDay(ctx, t, pool, noon)
	// Hold the upkeep's lock so that both start before either runs.
	gate, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Release()
	var gatePID uint32
	if err := gate.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1)) l`, int64(upkeepLock)).Scan(&gatePID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 2)
	for range 2 {
		go func() {
			n, err := store.EnsureHistoryPartitions(ctx, 0)
			done <- result{n, err}
		}()
	}
	waitForLockWaits(t, pool, 2, gatePID, "both upkeeps to wait for the upkeep's lock")
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(upkeepLock)); err != nil {
		t.Fatal(err)
	}
	created := 0
	for range 2 {
		r := <-done
		if r.err != nil {
			t.Errorf("upkeep beside another: %v", r.err)
		}
		created += r.n
	}
	if created != 6 {
		t.Errorf("the two upkeeps created %d partitions, want the day's 6", created)
	}
	wantDayMoved(t, pool, 1, 1)
}

// seedDefaultDay writes one finished task and its attempt at, a time of a day with
// no partitions, so that both land in history's default partitions.
func seedDefaultDay(ctx context.Context, t *testing.T, pool *pgxpool.Pool, at time.Time) {
	t.Helper()
	for _, q := range []string{insertHistoryTask, insertHistoryAttempt} {
		if _, err := pool.Exec(ctx, q, at); err != nil {
			t.Fatal(err)
		}
	}
}
