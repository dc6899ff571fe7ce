package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testenv"
)

// TestEnsureHistoryPartitions: taskforge_ensure_history_partitions (migration 0018)
// creates the day partitions of the six range-partitioned history tables once, and a
// day whose rows already wait in a default partition gets them moved into its new
// partition, counted once by the tally.
func TestEnsureHistoryPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.NewStore(t).Pool()
	day := time.Date(2031, 3, 7, 0, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `INSERT INTO queues (name) VALUES ('q')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO task_history (id, queue, payload, priority, status,
		scheduled_at, max_retries, finished_at) VALUES (gen_random_uuid(), 'q', '{}', 5, 'dead', $1, 3, $1)`,
		day.Add(13*time.Hour)); err != nil {
		t.Fatal(err)
	}
	var created int
	if err := pool.QueryRow(ctx, `SELECT taskforge_ensure_history_partitions($1::date, 2)`, day).Scan(&created); err != nil {
		t.Fatal(err)
	}
	if created != 12 {
		t.Fatalf("created %d partitions for 2 days, want 12 (6 tables)", created)
	}
	if err := pool.QueryRow(ctx, `SELECT taskforge_ensure_history_partitions($1::date, 2)`, day).Scan(&created); err != nil || created != 0 {
		t.Fatalf("second call created %d (%v), want 0", created, err)
	}
	var where string
	if err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM task_history`).Scan(&where); err != nil {
		t.Fatal(err)
	}
	if where != "task_history_dead_p20310307" {
		t.Fatalf("the row is in %s, want task_history_dead_p20310307", where)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(delta), 0) FROM queue_tally_delta
		WHERE queue = 'q' AND metric = 'dead'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("dead tally %d (%v), want 1", n, err)
	}
}
