package buffer_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

// FuzzScore checks the buffer's ordering for any priority (1..10), eligible time
// (years 2000..9999) and aging (none, or 1 ms..30 days): a score is finite, better
// priority wins under strict priority (among eligible times less than ~317 years
// apart, as buffered tasks are), earlier time wins within a priority, and the
// eligible time reads back exactly (a float64 holds it without rounding).
func FuzzScore(f *testing.F) {
	f.Add(1, int64(1767225600000), int64(0), int64(1))
	f.Add(10, int64(253402300799999), int64(0), int64(0))
	f.Add(5, int64(946684800000), int64(86400000), int64(1000))
	f.Fuzz(func(t *testing.T, priority int, ms, agingMs, dt int64) {
		const lo, hi = 946684800000, 253402300799999 // 2000-01-01 .. 9999-12-31, in Unix ms
		if priority < 1 || priority > 10 || ms < lo || ms > hi || agingMs < 0 || agingMs > 30*86400000 || dt < 0 || ms+dt > hi {
			t.Skip()
		}
		w := buffer.LevelWeightMs(agingMs)
		at := time.UnixMilli(ms)
		s := buffer.Score(priority, at, w)
		if math.IsNaN(s) || math.IsInf(s, 0) {
			t.Fatalf("score %v", s)
		}
		if got := s - float64(priority-1)*float64(w); got != float64(ms) {
			t.Fatalf("eligible time %d reads back as %v", ms, got)
		}
		if later := buffer.Score(priority, time.UnixMilli(ms+dt), w); later < s {
			t.Fatalf("later eligible time scores better: %v < %v", later, s)
		}
		if agingMs == 0 && priority < 10 && dt < w {
			// Strict priority: among buffered (due) tasks, whose eligible times lie
			// within ~317 years (w) of each other, the next level scores worse even when
			// it became eligible dt earlier.
			if buffer.Score(priority+1, at, w) <= buffer.Score(priority, time.UnixMilli(ms+dt), w) {
				t.Fatalf("priority %d eligible %d ms earlier overtakes priority %d", priority+1, dt, priority)
			}
		}
	})
}

// FuzzPopArguments runs the pop script (on real Redis) with arbitrary limits (rate, burst, cap,
// pause, count) as Pop encodes them: it never errors, pops no more than asked, held
// or allowed, and pops nothing from a paused queue.
func FuzzPopArguments(f *testing.F) {
	f.Add(3, 0.0, 0, 0, false, 5)
	f.Add(100, 0.5, 1, 2, false, 10)
	f.Add(1, 1e6, 1000000, 1, true, 3)
	f.Add(7, 1e-9, 1, 0, false, 7)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(f)})
	f.Cleanup(func() { _ = rdb.Close() })
	b := buffer.New(rdb, testenv.RedisPrefix(f))
	f.Fuzz(func(t *testing.T, n int, rate float64, burst, maxConc int, paused bool, held int) {
		// The ranges the API lets through (queue settings and poll bodies): a rate is
		// 0 (unlimited) or 1e-6..1e6 tasks/s.
		if n < 1 || n > 100 || math.IsNaN(rate) || rate < 0 || (rate > 0 && rate < 1e-6) || rate > 1e6 || burst < 0 || burst > 1e6 ||
			maxConc < 0 || maxConc > 1e6 || held < 0 || held > 50 {
			t.Skip()
		}
		ctx := context.Background()
		queue := uuid.NewString()
		tasks := make([]storage.Buffered, held)
		for i := range tasks {
			tasks[i] = storage.Buffered{ID: uuid.New(), Priority: 1 + i%10, ScheduledAt: time.Now()}
		}
		if held > 0 {
			if err := b.Add(ctx, queue, tasks, buffer.LevelWeightMs(0)); err != nil {
				t.Fatal(err)
			}
		}
		if maxConc > 0 {
			if _, _, err := b.Reconcile(ctx, queue, nil, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		limits := ratelimit.Limits{Rate: rate, Burst: max(burst, 1), MaxConcurrency: maxConc, Paused: paused}
		got, err := b.Pop(ctx, queue, n, limits)
		if err != nil {
			t.Fatalf("pop with %+v n=%d: %v", limits, n, err)
		}
		limit := min(n, held)
		if maxConc > 0 {
			limit = min(limit, maxConc)
		}
		if rate > 0 {
			limit = min(limit, max(burst, 1))
		}
		if paused {
			limit = 0
		}
		if len(got.Entries) > limit {
			t.Fatalf("popped %d with %+v n=%d held=%d, want at most %d", len(got.Entries), limits, n, held, limit)
		}
	})
}

// FuzzFairPopArguments runs the fair pop (on real Redis) with arbitrary queue and
// group limits as FairPop encodes them: it never errors, pops no more than asked,
// held or any limit allows, nothing from a paused queue, and no group past its cap.
func FuzzFairPopArguments(f *testing.F) {
	f.Add(3, 0.0, 0, 0, false, 0, 0.0, 0, 5, 2)
	f.Add(10, 0.5, 1, 2, false, 1, 2.5, 0, 10, 3)
	f.Add(7, 1e6, 1000000, 1, true, 3, 1e-6, 4, 3, 1)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(f)})
	f.Cleanup(func() { _ = rdb.Close() })
	b := buffer.New(rdb, testenv.RedisPrefix(f))
	f.Fuzz(func(t *testing.T, n int, rate float64, burst, maxConc int, paused bool, gcap int, grate float64, gburst, held, groups int) {
		if n < 1 || n > 100 || math.IsNaN(rate) || rate < 0 || (rate > 0 && rate < 1e-6) || rate > 1e6 || burst < 0 || burst > 1e6 ||
			maxConc < 0 || maxConc > 1e6 || gcap < 0 || gcap > 1e6 || math.IsNaN(grate) || grate < 0 || (grate > 0 && grate < 1e-6) ||
			grate > 1e6 || gburst < 0 || gburst > 1e6 || held < 0 || held > 50 || groups < 1 || groups > 10 {
			t.Skip()
		}
		ctx := context.Background()
		queue := uuid.NewString()
		tasks := make([]buffer.GroupedTask, held)
		for i := range tasks {
			tasks[i] = buffer.GroupedTask{Group: strconv.Itoa(i % groups), Buffered: storage.Buffered{ID: uuid.New(), Priority: 1 + i%10, ScheduledAt: time.Now()}}
		}
		if err := b.AddGrouped(ctx, queue, tasks, buffer.LevelWeightMs(0)); err != nil {
			t.Fatal(err)
		}
		if _, _, _, _, err := b.ReconcileGrouped(ctx, queue, nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		limits := ratelimit.Limits{Rate: rate, Burst: max(burst, 1), MaxConcurrency: maxConc, Paused: paused}
		gl := buffer.GroupLimits{MaxConcurrency: gcap, Rate: grate, Burst: gburst}
		got, err := b.FairPop(ctx, queue, n, limits, gl)
		if err != nil {
			t.Fatalf("fair pop with %+v %+v n=%d: %v", limits, gl, n, err)
		}
		limit := min(n, held)
		if maxConc > 0 {
			limit = min(limit, maxConc)
		}
		if rate > 0 {
			limit = min(limit, max(burst, 1))
		}
		if paused {
			limit = 0
		}
		if len(got.Entries) > limit {
			t.Fatalf("popped %d with %+v %+v n=%d held=%d, want at most %d", len(got.Entries), limits, gl, n, held, limit)
		}
		per := map[string]int{}
		for _, e := range got.Entries {
			per[e.Group]++
			if gcap > 0 && per[e.Group] > gcap {
				t.Fatalf("group %s got %d over its cap %d", e.Group, per[e.Group], gcap)
			}
		}
	})
}
