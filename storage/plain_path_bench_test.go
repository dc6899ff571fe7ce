package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskforge/taskforge/storage"
)

// BenchmarkPlainTaskPath runs the statements of one plain worker's E1 (`taskforge
// bench --experiments e1 --e1-layouts 1x1/plain`), one after another on one
// goroutine, for 500 tasks an iteration: the dispatch in picks of 100, then for each
// task a claim of that task alone and an ack of it alone (ack_plain_tasks, the
// statement a worker's POST .../ack runs), then the fold of the counts' deltas. The
// enqueue, in one batch, is outside the measure. It reports PostgreSQL's CPU per
// task (pg-µs/task, from /proc, every backend of the test's database) beside the
// wall time: E1's PostgreSQL CPU per task without serve, workers, Redis, HTTP and
// the harness's polls around it, for a quieter A/B of the schema and statements.
func BenchmarkPlainTaskPath(b *testing.B) {
	const perIteration = 500
	ctx := context.Background()
	s := newStore(b)
	var ticks int64
	run := func(measure bool) {
		before := enqueueNoops(b, s, "q", perIteration, measure)
		var due []storage.Buffered
		for len(due) < perIteration {
			got, err := s.DispatchDue(ctx, "q", 100, 1e13)
			if err != nil || len(got) == 0 {
				b.Fatalf("dispatched %d (%v)", len(got), err)
			}
			due = append(due, got...)
		}
		for _, d := range due {
			claimed, err := s.ClaimMany(ctx, []storage.ClaimItem{{TaskID: d.ID, WorkerID: "w"}}, time.Minute)
			if err != nil || len(claimed) != 1 {
				b.Fatalf("claimed %d of 1 (%v)", len(claimed), err)
			}
			t := claimed[d.ID]
			if _, err := s.Ack(ctx, "w", t.ID, *t.LeaseToken, nil); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := s.FoldTally(ctx, 10_000); err != nil {
			b.Fatal(err)
		}
		if measure {
			ticks += backendTicks(b, s) - before
		}
	}
	warmThenMeasure(b, s, run)
	n := float64(b.N * perIteration)
	b.ReportMetric(float64(ticks)*1e6/100/n, "pg-µs/task") // 100 clock ticks a second
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/n, "µs/task")
}
