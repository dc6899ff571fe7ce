package storage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
)

// BenchmarkGroupedTaskPath runs E1's statements, one after another on one
// goroutine, for 1,000 tasks an iteration: the enqueue in one batch (pending), the
// dispatch in picks of 100, claims and acks (by ref) of 16 tasks at a time, and the
// folds of the counts' deltas, on a plain queue and on a fair queue whose tasks are
// all in one group. It reports PostgreSQL's CPU per task (pg-µs/task, read from
// /proc for every backend of the test's database) beside the wall time: the
// figure a fair queue's group counts add to a task's path (migration 0028).
func BenchmarkGroupedTaskPath(b *testing.B) {
	const perIteration = 1000
	for _, fair := range []bool{false, true} {
		name := "plain"
		if fair {
			name = "fair-one-group"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			s := newStore(b)
			group := "tenant"
			if fair {
				rr := storage.FairnessRoundRobin
				if _, err := s.CreateQueue(ctx, storage.Queue{Name: "fq", MaxRetries: 3, Fairness: &rr}); err != nil {
					b.Fatal(err)
				}
			}
			queue := map[bool]string{false: "q", true: "fq"}[fair]
			run := func() {
				tasks := make([]storage.NewTask, perIteration)
				for i := range tasks {
					tasks[i] = storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{}`), Priority: 5}
					if fair {
						tasks[i].Group = &group
					}
				}
				if _, err := s.EnqueueWith(ctx, queue, tasks, storage.EnqueueOptions{Refs: true}); err != nil {
					b.Fatal(err)
				}
				var due []storage.Buffered
				for len(due) < perIteration {
					var got []storage.Buffered
					var err error
					if fair {
						got, err = s.DispatchDueGrouped(ctx, queue, []storage.GroupPick{{Priority: 5, Group: &group, N: 100}})
					} else {
						got, err = s.DispatchDue(ctx, queue, 100, 1e13)
					}
					if err != nil || len(got) == 0 {
						b.Fatalf("dispatched %d (%v)", len(got), err)
					}
					due = append(due, got...)
				}
				for i := 0; i < len(due); i += 16 {
					items := make([]storage.ClaimItem, 0, 16)
					for _, d := range due[i:min(i+16, len(due))] {
						items = append(items, storage.ClaimItem{TaskID: d.ID, WorkerID: "w"})
					}
					claimed, err := s.ClaimMany(ctx, items, time.Minute)
					if err != nil || len(claimed) != len(items) {
						b.Fatalf("claimed %d of %d (%v)", len(claimed), len(items), err)
					}
					acks := make([]storage.AckItem, 0, len(claimed))
					for _, t := range claimed {
						acks = append(acks, storage.AckItem{TaskID: t.ID, LeaseToken: *t.LeaseToken, WorkerID: "w"})
					}
					if acked, err := s.AckMany(ctx, acks, true); err != nil || len(acked) != len(acks) {
						b.Fatalf("acked %d of %d (%v)", len(acked), len(acks), err)
					}
				}
				if _, err := s.FoldTally(ctx, 10_000); err != nil {
					b.Fatal(err)
				}
				if _, err := s.FoldGroupTally(ctx, 10_000); err != nil {
					b.Fatal(err)
				}
			}
			run() // warm-up: plans cached, tables touched
			if _, err := s.Pool().Exec(ctx, `ANALYZE tasks`); err != nil {
				b.Fatal(err)
			}
			before := backendTicks(b, s)
			b.ResetTimer()
			for range b.N {
				run()
			}
			b.StopTimer()
			ticks := backendTicks(b, s) - before
			tasks := float64(b.N * perIteration)
			b.ReportMetric(float64(ticks)*1e6/100/tasks, "pg-µs/task") // 100 clock ticks a second
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/tasks, "µs/task")
		})
	}
}

// enqueueNoops enqueues n no-op tasks (priority 5) into queue outside the timer when
// measuring, and returns the backends' ticks once they are in (0 when not measuring),
// for the benchmarks that time what follows an enqueue.
func enqueueNoops(b *testing.B, s *storage.Store, queue string, n int, measure bool) (before int64) {
	b.Helper()
	tasks := make([]storage.NewTask, n)
	for i := range tasks {
		tasks[i] = storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{}`), Priority: 5}
	}
	if measure {
		b.StopTimer()
	}
	if _, err := s.EnqueueWith(context.Background(), queue, tasks, storage.EnqueueOptions{Refs: true}); err != nil {
		b.Fatal(err)
	}
	if measure {
		before = backendTicks(b, s)
		b.StartTimer()
	}
	return before
}

// warmThenMeasure runs run once unmeasured (plans cached, tables touched), analyzes
// tasks as it then stands, and runs it b.N times measured.
func warmThenMeasure(b *testing.B, s *storage.Store, run func(measure bool)) {
	b.Helper()
	run(false)
	if _, err := s.Pool().Exec(context.Background(), `ANALYZE tasks`); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		run(true)
	}
}

// backendTicks sums utime + stime of the backends of s's database (both pools'
// connections, opened by the warm-up and kept by the pools), from /proc.
func backendTicks(b *testing.B, s *storage.Store) int64 {
	b.Helper()
	rows, err := s.Pool().Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	var pid int
	for rows.Next() {
		if err := rows.Scan(&pid); err != nil {
			b.Fatal(err)
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // exited, or another host's
		}
		// the fields after the command's closing parenthesis; utime and stime are
		// the 14th and 15th of the line
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += u + st
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return total
}
