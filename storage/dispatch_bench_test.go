package storage_test

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkDispatchDue runs dispatch_due alone (Store.DispatchDue) on a queue of
// 1,000 due tasks of one priority an iteration, in batches of 1 to 500 (the
// dispatcher's BatchSize), and reports PostgreSQL's CPU per call and per task
// (pg-µs, from /proc, every backend of the test's database): what a call costs
// whatever it moves (its probes of the ten priority levels' heads, its plan, its
// triggers) against what each task moved adds. The enqueue is outside the measure.
func BenchmarkDispatchDue(b *testing.B) {
	const perIteration = 1000
	for _, batch := range []int{1, 10, 100, 500} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ctx := context.Background()
			s := newStore(b)
			var ticks int64
			calls := 0
			run := func(measure bool) {
				before := enqueueNoops(b, s, "q", perIteration, measure)
				for moved := 0; moved < perIteration; {
					got, err := s.DispatchDue(ctx, "q", batch, 1e13)
					if err != nil || len(got) == 0 {
						b.Fatalf("dispatched %d (%v)", len(got), err)
					}
					moved += len(got)
					if measure {
						calls++
					}
				}
				if measure {
					b.StopTimer()
					ticks += backendTicks(b, s) - before
				}
				// claimed → deleted outside the measure, so every iteration's table looks alike
				if _, err := s.Pool().Exec(ctx, `DELETE FROM tasks`); err != nil {
					b.Fatal(err)
				}
				if _, err := s.FoldTally(ctx, 10_000); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Pool().Exec(ctx, `VACUUM tasks`); err != nil {
					b.Fatal(err)
				}
				if measure {
					b.StartTimer()
				}
			}
			warmThenMeasure(b, s, run)
			n := float64(b.N * perIteration)
			b.ReportMetric(float64(ticks)*1e6/100/n, "pg-µs/task") // 100 clock ticks a second
			b.ReportMetric(float64(ticks)*1e6/100/float64(calls), "pg-µs/call")
		})
	}
}
