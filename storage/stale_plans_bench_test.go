package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// BenchmarkStaleStatsClaimAck claims and acks one task at a time on a hot-path pool
// of one connection after the statistics of tasks went stale (design-notes.md,
// "Plans made once"), and reports PostgreSQL's CPU and the wall time per task:
//
//   - planned at 1,600: the connection made its plans while tasks held 1,600
//     pending rows (analysed), then 10,000 more arrived (no index grew a level, so
//     the plans are kept);
//   - drained, 300k: tasks was analysed after a drain (no live row, its pages
//     left), then 300,000 pending rows arrived; PostgreSQL believes the table empty.
func BenchmarkStaleStatsClaimAck(b *testing.B) {
	const fill = `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries)
		SELECT gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3 FROM generate_series(1, $1::int)`
	for _, c := range []struct {
		name          string
		before, after []string
		args          []any
	}{
		{"planned at 1,600", []string{fill, "ANALYZE tasks"}, []string{fill}, []any{1600, 10000}},
		{"drained, 300k", []string{fill, "DELETE FROM tasks", "ANALYZE tasks"}, []string{fill}, []any{1600, 300000}},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			url, pool := testenv.NewMigratedDatabase(b)
			hot, err := storage.Connect(ctx, url, 1, storage.HotPathSettings())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(hot.Close)
			s := storage.New(pool, storage.WithHotPool(hot))
			if _, err := s.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 3}); err != nil {
				b.Fatal(err)
			}
			for _, stmt := range c.before {
				var args []any
				if stmt == fill {
					args = c.args[:1]
				}
				if _, err := pool.Exec(ctx, stmt, args...); err != nil {
					b.Fatal(err)
				}
			}
			// the hot connection plans the claim and the ack now
			claimAck(b, s, dispatchMore(b, s, 1))
			for _, stmt := range c.after {
				if _, err := pool.Exec(ctx, stmt, c.args[1]); err != nil {
					b.Fatal(err)
				}
			}
			ids := dispatchMore(b, s, b.N)
			before := backendTicks(b, s)
			b.ResetTimer()
			claimAck(b, s, ids)
			b.StopTimer()
			ticks := backendTicks(b, s) - before
			b.ReportMetric(float64(ticks)*1e6/100/float64(b.N), "pg-µs/task")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "µs/task")
		})
	}
}

// dispatchMore enqueues n tasks of queue q with a priority above the backlog's and
// dispatches them (claimed, buffered), returning their ids.
func dispatchMore(b *testing.B, s *storage.Store, n int) []uuid.UUID {
	b.Helper()
	ctx := context.Background()
	tasks := newTasks(n)
	for i := range tasks {
		tasks[i].Priority = 10
	}
	if _, err := s.Enqueue(ctx, "q", tasks, nil); err != nil {
		b.Fatal(err)
	}
	var ids []uuid.UUID
	for len(ids) < n {
		got, err := s.DispatchDue(ctx, "q", min(500, n-len(ids)), 1e13)
		if err != nil || len(got) == 0 {
			b.Fatalf("dispatched %d (%v)", len(got), err)
		}
		for _, d := range got {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// claimAck claims and acks each of ids alone, as a plain worker does.
func claimAck(b *testing.B, s *storage.Store, ids []uuid.UUID) {
	b.Helper()
	ctx := context.Background()
	for _, id := range ids {
		claimed, err := s.ClaimMany(ctx, []storage.ClaimItem{{TaskID: id, WorkerID: "w"}}, time.Minute)
		if err != nil || len(claimed) != 1 {
			b.Fatalf("claimed %d of 1 (%v)", len(claimed), err)
		}
		if _, err := s.Ack(ctx, "w", id, *claimed[id].LeaseToken, nil); err != nil {
			b.Fatal(err)
		}
	}
}
