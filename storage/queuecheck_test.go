package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/storage"
)

// insertTask is an insert of one pending task into queue that takes no lock of its
// own on the queue (unlike the enqueue statement): only the schema guards it.
const insertTask = `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries)
VALUES ($1, $2, '{}', 5, 'pending', now(), 3)`

// wantQueueViolation fails unless err is the foreign_key_violation on
// tasks_queue_fkey that a missing queue raised when tasks.queue had a foreign key.
func wantQueueViolation(t *testing.T, what string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23503" || pgErr.ConstraintName != "tasks_queue_fkey" {
		t.Fatalf("%s: got %v, want foreign_key_violation on tasks_queue_fkey", what, err)
	}
}

func countTasks(t *testing.T, pool *pgxpool.Pool, queue string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM all_tasks WHERE queue = $1`, queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitUntilBlocked waits until a backend runs a statement starting with prefix and
// waits for a lock.
func waitUntilBlocked(t *testing.T, pool *pgxpool.Pool, prefix string) {
	t.Helper()
	testserver.Eventually(t, 10*time.Second, prefix+" waits for a lock", func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1 || '%'`, prefix).Scan(&n)
		return n > 0
	})
}

// TestTaskQueueIsCheckedLikeAForeignKey: migration 0015 replaced the foreign key
// from tasks to queues with per-statement triggers; each of its guarantees holds.
func TestTaskQueueIsCheckedLikeAForeignKey(t *testing.T) {
	ctx := context.Background()
	store, pool := queueWithRows(t)

	// A statement naming a missing queue fails whole, with the foreign key's error.
	_, err := pool.Exec(ctx, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries)
		VALUES (gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3),
		       (gen_random_uuid(), 'nope', '{}', 5, 'pending', now(), 3)`)
	wantQueueViolation(t, "insert into a missing queue", err)
	if n := countTasks(t, pool, "q"); n != 0 {
		t.Fatalf("the failed insert left %d tasks in q", n)
	}
	// Store paths that insert tasks still tell a missing queue apart.
	if _, err := store.Enqueue(ctx, "nope", newTasks(3), nil); !errors.Is(err, storage.ErrQueueNotFound) {
		t.Fatalf("enqueue into a missing queue: %v, want ErrQueueNotFound", err)
	}

	// A task cannot move to a missing queue, and a queue holding tasks keeps its name.
	if _, err := store.Enqueue(ctx, "q", newTasks(2), nil); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `UPDATE tasks SET queue = 'nope' WHERE queue = 'q'`)
	wantQueueViolation(t, "move to a missing queue", err)
	_, err = pool.Exec(ctx, `UPDATE queues SET name = 'q2' WHERE name = 'q'`)
	wantQueueViolation(t, "rename a queue holding tasks", err)
	if _, err := store.CreateQueue(ctx, storage.Queue{Name: "empty", MaxRetries: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE queues SET name = 'emptied' WHERE name = 'empty'`); err != nil {
		t.Fatalf("rename a queue without tasks: %v", err)
	}

	// Deleting a queue deletes its tasks and their attempts.
	ids := dispatchAll(t, store)
	if _, err := testenv.Claim(ctx, store, ids[:1], "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM queues WHERE name = 'q'`); err != nil {
		t.Fatal(err)
	}
	var tasks, attempts int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM all_tasks), (SELECT count(*) FROM all_attempts)`).Scan(&tasks, &attempts); err != nil {
		t.Fatal(err)
	}
	if tasks != 0 || attempts != 0 {
		t.Fatalf("after deleting the queue: %d tasks, %d attempts left", tasks, attempts)
	}
}

// TestQueueDeleteAndTaskInsertSerialise: an insert's check holds the queue as the
// foreign key's did, so a delete waits for the insert's transaction and then takes
// its tasks with the queue; and an insert that meets a delete in progress waits for
// it and fails once it commits. Either way no task outlives its queue.
func TestQueueDeleteAndTaskInsertSerialise(t *testing.T) {
	ctx := context.Background()
	_, pool := queueWithRows(t)

	t.Run("the delete waits for the insert", func(t *testing.T) {
		if _, err := pool.Exec(ctx, `INSERT INTO queues (name) VALUES ('first')`); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, insertTask, uuid.New(), "first"); err != nil {
			t.Fatal(err)
		}
		deleted := make(chan error, 1)
		go func() {
			_, err := pool.Exec(ctx, `DELETE FROM queues WHERE name = 'first'`)
			deleted <- err
		}()
		waitUntilBlocked(t, pool, "DELETE FROM queues")
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-deleted; err != nil {
			t.Fatal(err)
		}
		if n := countTasks(t, pool, "first"); n != 0 {
			t.Fatalf("%d tasks outlived their queue", n)
		}
	})

	// insertDuringDelete creates queue, deletes it in a transaction left open, and
	// starts an insert of a task into it, which must wait for that transaction.
	insertDuringDelete := func(t *testing.T, queue string) (pgx.Tx, <-chan error) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO queues (name) VALUES ($1)`, queue); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		if _, err := tx.Exec(ctx, `DELETE FROM queues WHERE name = $1`, queue); err != nil {
			t.Fatal(err)
		}
		inserted := make(chan error, 1)
		go func() {
			_, err := pool.Exec(ctx, insertTask, uuid.New(), queue)
			inserted <- err
		}()
		waitUntilBlocked(t, pool, "INSERT INTO tasks")
		return tx, inserted
	}

	t.Run("the insert waits for the delete", func(t *testing.T) {
		tx, inserted := insertDuringDelete(t, "second")
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wantQueueViolation(t, "insert after the queue's delete committed", <-inserted)
		if n := countTasks(t, pool, "second"); n != 0 {
			t.Fatalf("%d tasks outlived their queue", n)
		}
	})

	t.Run("an insert goes on when the delete rolls back", func(t *testing.T) {
		tx, inserted := insertDuringDelete(t, "third")
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-inserted; err != nil {
			t.Fatalf("insert after the delete rolled back: %v", err)
		}
		if n := countTasks(t, pool, "third"); n != 1 {
			t.Fatalf("queue third holds %d tasks, want 1", n)
		}
	})
}
