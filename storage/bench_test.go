package storage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newStore returns a Store on a fresh, migrated database with one queue "q".
func newStore(tb testing.TB) *storage.Store {
	tb.Helper()
	ctx := context.Background()
	s := testenv.NewStore(tb)
	if _, err := s.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 3, BackoffBaseMs: 1000, BackoffMaxMs: 3600000}); err != nil {
		tb.Fatal(err)
	}
	return s
}

func newTasks(n int) []storage.NewTask {
	out := make([]storage.NewTask, n)
	for i := range out {
		out[i] = storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{"n":1}`), Priority: 1 + i%10}
	}
	return out
}

// dispatchAll moves every due task to claimed and returns their ids.
func dispatchAll(tb testing.TB, s *storage.Store) []uuid.UUID {
	var ids []uuid.UUID
	for {
		batch, err := s.DispatchDue(context.Background(), "q", 500, 1e13)
		if err != nil {
			tb.Fatal(err)
		}
		for _, b := range batch {
			ids = append(ids, b.ID)
		}
		if len(batch) < 500 {
			return ids
		}
	}
}

// BenchmarkEnqueue inserts batches of tasks returning whole rows, and batches of
// 1,000 returning only refs (EnqueueOptions.Refs, a minimal batch's statement). Its
// B/op and allocs/op are what serve spends on reading the answer back.
func BenchmarkEnqueue(b *testing.B) {
	for _, c := range []struct {
		size int
		refs bool
	}{{1, false}, {100, false}, {1000, false}, {1000, true}} {
		name := fmt.Sprintf("batch=%d", c.size)
		if c.refs {
			name += "/refs"
		}
		b.Run(name, func(b *testing.B) {
			s := newStore(b)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.EnqueueWith(ctx, "q", newTasks(c.size), storage.EnqueueOptions{Refs: c.refs}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*c.size)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

// BenchmarkDispatch moves a backlog's due tasks to the buffer in passes of the
// dispatcher's default batch (500), from a backlog of one priority and from one
// spread over all ten. Besides tasks/s it reports pg-cpu-µs/task, as
// BenchmarkClaimAckBatch does (run nothing else meanwhile).
func BenchmarkDispatch(b *testing.B) {
	for _, levels := range []int{1, 10} {
		b.Run(fmt.Sprintf("priorities=%d", levels), func(b *testing.B) {
			s := newStore(b)
			ctx := context.Background()
			const batch = 500
			refill := func() {
				for done := 0; done < 20000; done += 1000 {
					tasks := newTasks(1000)
					for i := range tasks {
						tasks[i].Priority = 1 + i%levels
					}
					if _, err := s.Enqueue(ctx, "q", tasks, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			refill()
			var refillCPU time.Duration
			b.ResetTimer()
			startCPU := postgresCPU(b)
			moved := 0
			for b.Loop() {
				got, err := s.DispatchDue(ctx, "q", batch, 1e13)
				if err != nil {
					b.Fatal(err)
				}
				if len(got) == 0 {
					b.StopTimer()
					before := postgresCPU(b)
					refill()
					refillCPU += postgresCPU(b) - before
					b.StartTimer()
				}
				moved += len(got)
			}
			b.StopTimer()
			workCPU := postgresCPU(b) - startCPU - refillCPU
			b.ReportMetric(float64(moved)/b.Elapsed().Seconds(), "tasks/s")
			b.ReportMetric(float64(workCPU.Microseconds())/float64(max(moved, 1)), "pg-cpu-µs/task")
		})
	}
}

// benchClaimAck claims size tasks per statement and acks each.
func BenchmarkClaimAck(b *testing.B) {
	for _, size := range []int{1, 10} {
		b.Run(fmt.Sprintf("claim=%d", size), func(b *testing.B) {
			s := newStore(b)
			ctx := context.Background()
			var ids []uuid.UUID
			b.ResetTimer()
			for b.Loop() {
				if len(ids) < size {
					b.StopTimer()
					if _, err := s.Enqueue(ctx, "q", newTasks(1000), nil); err != nil {
						b.Fatal(err)
					}
					ids = append(ids, dispatchAll(b, s)...)
					b.StartTimer()
				}
				claimed, err := testenv.Claim(ctx, s, ids[:size], "bench", 30*time.Second)
				ids = ids[size:]
				if err != nil || len(claimed) != size {
					b.Fatalf("claimed %d of %d: %v", len(claimed), size, err)
				}
				for _, t := range claimed {
					if _, err := s.Ack(ctx, "bench", t.ID, *t.LeaseToken, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

// BenchmarkClaimAckBatch is a batched worker's share of PostgreSQL per task: claim
// a poll's worth of buffered tasks in one statement, ack them all in another (the
// plain ack a batched worker's tasks take), on hot-path connections. Besides
// tasks/s it reports pg-cpu-µs/task: the CPU of every postgres process on the
// machine during the claims and acks (not the refills), so run nothing else
// meanwhile.
func BenchmarkClaimAckBatch(b *testing.B) {
	const size = 50
	s := newStore(b)
	ctx := context.Background()
	var ids []uuid.UUID
	var refillCPU time.Duration
	b.ResetTimer()
	startCPU := postgresCPU(b)
	for b.Loop() {
		if len(ids) < size {
			b.StopTimer()
			before := postgresCPU(b)
			if _, err := s.Enqueue(ctx, "q", newTasks(5000), nil); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, dispatchAll(b, s)...)
			refillCPU += postgresCPU(b) - before
			b.StartTimer()
		}
		claimed, err := testenv.Claim(ctx, s, ids[:size], "bench", 30*time.Second)
		ids = ids[size:]
		if err != nil || len(claimed) != size {
			b.Fatalf("claimed %d of %d: %v", len(claimed), size, err)
		}
		items := make([]storage.AckItem, len(claimed))
		for i, t := range claimed {
			items[i] = storage.AckItem{TaskID: t.ID, LeaseToken: *t.LeaseToken, WorkerID: "bench"}
		}
		if acked, err := s.AckMany(ctx, items, false); err != nil || len(acked) != size {
			b.Fatalf("acked %d of %d: %v", len(acked), size, err)
		}
	}
	b.StopTimer()
	workCPU := postgresCPU(b) - startCPU - refillCPU
	b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "tasks/s")
	b.ReportMetric(float64(workCPU.Microseconds())/float64(b.N*size), "pg-cpu-µs/task")
}

// postgresCPU is the CPU time so far of every process named postgres on this
// machine (this benchmark's backends, and the WAL writer and checkpointer).
func postgresCPU(tb testing.TB) time.Duration {
	tb.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		tb.Skipf("no /proc: %v", err)
	}
	var ticks int64
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open || s[open+1:close] != "postgres" {
			continue
		}
		f := strings.Fields(s[close+1:]) // f[0] is field 3 (state); utime, stime are 14, 15
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + k
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
