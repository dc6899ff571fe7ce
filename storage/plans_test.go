package storage_test

import (
	"context"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// TestEnqueueProbeStaysOnTheDispatchIndex: once ANALYZE has seen one queue's
// backlog and another's dead tasks, the enqueue's probe for due work still reads
// tasks_dispatch_idx, never the whole table (a sequential scan made every enqueue
// of an idle queue cost 80 ms at 40,000 rows and seconds at 2 million).
func TestEnqueueProbeStaysOnTheDispatchIndex(t *testing.T) {
	ctx := context.Background()
	store := testenv.NewStore(t)
	for _, q := range []string{"live", "bulk"} {
		if _, err := store.CreateQueue(ctx, storage.Queue{Name: q, MaxRetries: 3}); err != nil {
			t.Fatal(err)
		}
	}
	pool := store.Pool()
	if _, err := pool.Exec(ctx, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at,
			max_retries, attempts, created_at, updated_at, finished_at)
		SELECT gen_random_uuid(), CASE WHEN g % 2 = 0 THEN 'bulk' ELSE 'live' END, '{}', 5,
			CASE WHEN g % 2 = 0 THEN 'pending' ELSE 'dead' END, now() - interval '1 hour', 0,
			g % 2, now() - interval '1 hour', now() - interval '1 hour',
			CASE WHEN g % 2 = 1 THEN now() END
		FROM generate_series(1, 40000) AS g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE tasks"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"live", "bulk"} {
		rows, err := pool.Query(ctx, "EXPLAIN "+storage.EnqueueTasks, q, storage.DueChannel,
			[]string{}, []string{}, []int32{}, []*string{}, []*int32{}, []*int32{}, []*string{}, [][]byte{},
			nil, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		if strings.Contains(text, "Seq Scan on tasks") || !strings.Contains(text, "tasks_dispatch_idx") {
			t.Errorf("the enqueue's probe of queue %s is not planned on tasks_dispatch_idx:\n%s", q, text)
		}
	}
}
