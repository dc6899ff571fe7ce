package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fill buffers n fresh ids in queue q.
func fill(t testing.TB, b *buffer.Buffer, n int) {
	t.Helper()
	tasks := make([]storage.Buffered, n)
	now := time.Now()
	for i := range tasks {
		tasks[i] = storage.Buffered{ID: uuid.New(), Priority: 5, ScheduledAt: now}
	}
	if err := b.Add(context.Background(), "q", tasks, buffer.LevelWeightMs(0)); err != nil {
		t.Fatal(err)
	}
}

// checkBucket drives the Lua bucket with random pops (and, through advance, random
// time steps) and compares every pop with the Go reference model at the Redis time
// the script reports.
func checkBucket(rt *rapid.T, b *buffer.Buffer, advance func(rt *rapid.T)) {
	limits := ratelimit.Limits{
		Rate:  rapid.Float64Range(0.5, 500).Draw(rt, "rate"),
		Burst: rapid.IntRange(1, 60).Draw(rt, "burst"),
	}
	model := ratelimit.Bucket{Rate: limits.Rate, Burst: limits.Burst}
	steps := rapid.IntRange(1, 30).Draw(rt, "steps")
	for i := 0; i < steps; i++ {
		advance(rt)
		want := rapid.IntRange(1, 25).Draw(rt, "want")
		popped, err := b.Pop(context.Background(), "q", want, limits)
		if err != nil {
			rt.Fatal(err)
		}
		if exp := model.Take(popped.RedisTimeUs, want); len(popped.Entries) != exp {
			rt.Fatalf("step %d (t=%d µs): script popped %d of %d, model allows %d", i, popped.RedisTimeUs, len(popped.Entries), want, exp)
		}
		if len(popped.Entries) < want && popped.RetryAfter <= 0 {
			rt.Fatalf("step %d: short pop without a retry_after hint", i)
		}
	}
}

func TestBucketMatchesModelOnMiniredis(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	check := 0
	rapid.Check(t, func(rt *rapid.T) {
		check++
		b := buffer.New(rdb, "prop"+uuid.NewString()[:8])
		fill(t, b, 2000)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		mr.SetTime(now)
		checkBucket(rt, b, func(rt *rapid.T) {
			now = now.Add(time.Duration(rapid.Int64Range(0, 3_000_000).Draw(rt, "step_us")) * time.Microsecond)
			mr.SetTime(now)
		})
	})
}

func TestBucketMatchesModelOnRedis(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testenv.RedisPrefix(t)
	rapid.Check(t, func(rt *rapid.T) {
		b := buffer.New(rdb, prefix+":"+uuid.NewString()[:8])
		fill(t, b, 1000)
		// Real time: steps are whatever passes between calls, plus an occasional nap.
		// The bucket reads Redis's TIME, which no test can set: only real time moves it.
		checkBucket(rt, b, func(rt *rapid.T) {
			if rapid.IntRange(0, 4).Draw(rt, "nap") == 0 {
				time.Sleep(time.Duration(rapid.IntRange(1, 15).Draw(rt, "nap_ms")) * time.Millisecond) // Redis TIME moves only with real time: no signal or clock serves
			}
		})
	})
}

func backends(t *testing.T, fn func(t *testing.T, b *buffer.Buffer, rdb *redis.Client)) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
		t.Cleanup(func() { _ = rdb.Close() })
		fn(t, buffer.New(rdb, testenv.RedisPrefix(t)), rdb)
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		fn(t, buffer.New(rdb, "tf"), rdb)
	})
}

func TestConcurrencyCapSlotsAndSync(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer, rdb *redis.Client) {
		ctx := context.Background()
		fill(t, b, 10)
		capped := ratelimit.Limits{MaxConcurrency: 3}
		popped, err := b.Pop(ctx, "q", 5, capped)
		if err != nil || !popped.NeedSync || len(popped.Entries) != 0 {
			t.Fatalf("first pop must ask for a sync: %+v %v", popped, err)
		}
		if _, _, err := b.Reconcile(ctx, "q", nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		popped, err = b.Pop(ctx, "q", 5, capped)
		if err != nil || len(popped.Entries) != 3 {
			t.Fatalf("capped pop took %d (%v), want 3", len(popped.Entries), err)
		}
		if more, _ := b.Pop(ctx, "q", 5, capped); len(more.Entries) != 0 {
			t.Fatalf("pop past the cap took %d", len(more.Entries))
		}
		if err := b.Release(ctx, "q", popped.Entries[0].ID); err != nil {
			t.Fatal(err)
		}
		// A stale duplicate of a running task (the repair re-added its id) is dropped
		// rather than handed out: its failed claim must not free the real task's slot.
		dup := storage.Buffered{ID: popped.Entries[1].ID, Priority: 1, ScheduledAt: time.Now()}
		if err := b.Add(ctx, "q", []storage.Buffered{dup}, buffer.LevelWeightMs(0)); err != nil {
			t.Fatal(err)
		}
		more, _ := b.Pop(ctx, "q", 5, capped)
		if len(more.Entries) != 0 || rdb.ZScore(ctx, b.RunningKey("q"), dup.ID.String()).Err() != nil {
			t.Fatalf("the duplicate was handed out (%v) or lost its slot", more.Entries)
		}
		if more, _ := b.Pop(ctx, "q", 5, capped); len(more.Entries) != 1 {
			t.Fatalf("after one release took %d, want 1", len(more.Entries))
		}
		// Reconcile: PostgreSQL shows only popped[1] executing. Young slots survive
		// (they may be between pop and claim); with no grace the rest are freed.
		if added, freed, err := b.Reconcile(ctx, "q", []uuid.UUID{popped.Entries[1].ID}, time.Minute); err != nil || added != 0 || freed != 0 {
			t.Fatalf("reconcile with grace: +%d -%d %v", added, freed, err)
		}
		if added, freed, err := b.Reconcile(ctx, "q", []uuid.UUID{popped.Entries[1].ID}, 0); err != nil || added != 0 || freed != 2 {
			t.Fatalf("reconcile without grace: +%d -%d %v, want +0 -2", added, freed, err)
		}
		if n := rdb.ZCard(ctx, b.RunningKey("q")).Val(); n != 1 {
			t.Fatalf("%d slots held, want 1", n)
		}
		// Losing Redis data: the pop refuses until the slots are rebuilt.
		rdb.Del(ctx, b.RunningKey("q"))
		if err := b.Unsync(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		if p, _ := b.Pop(ctx, "q", 5, capped); !p.NeedSync {
			t.Fatalf("pop after losing slots did not ask for a sync: %+v", p)
		}
		exec := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
		if added, _, err := b.Reconcile(ctx, "q", exec, time.Minute); err != nil || added != 3 {
			t.Fatalf("rebuild: +%d %v", added, err)
		}
		if p, _ := b.Pop(ctx, "q", 5, capped); len(p.Entries) != 0 || p.NeedSync {
			t.Fatalf("rebuilt slots are full, yet the pop took %d", len(p.Entries))
		}
	})
}

func TestPausedQueuePopsNothing(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer, rdb *redis.Client) {
		fill(t, b, 3)
		p, err := b.Pop(context.Background(), "q", 3, ratelimit.Limits{Paused: true})
		if err != nil || !p.Paused || len(p.Entries) != 0 {
			t.Fatalf("paused pop: %+v %v", p, err)
		}
		if n := rdb.ZCard(context.Background(), b.Key("q")).Val(); n != 3 {
			t.Fatalf("paused pop changed the buffer: %d left", n)
		}
	})
}

func TestOfDefaultsBurstToCeilRate(t *testing.T) {
	rate, burst, cap, aging := 2.5, 7, 4, int64(100)
	if l := ratelimit.Of(storage.Queue{RateLimit: &rate}); l.Rate != 2.5 || l.Burst != 3 {
		t.Fatalf("default burst: %+v", l)
	}
	l := ratelimit.Of(storage.Queue{RateLimit: &rate, RateBurst: &burst, MaxConcurrency: &cap, PriorityAgingMs: &aging, Paused: true})
	if l != (ratelimit.Limits{Rate: 2.5, Burst: 7, MaxConcurrency: 4, Paused: true, AgingMs: 100}) {
		t.Fatalf("limits: %+v", l)
	}
	if l := ratelimit.Of(storage.Queue{}); l != (ratelimit.Limits{}) {
		t.Fatalf("no limits: %+v", l)
	}
}

func BenchmarkPop(b *testing.B) {
	for _, bc := range []struct {
		name   string
		limits ratelimit.Limits
	}{
		{"unlimited", ratelimit.Limits{}},
		{"rate_limited", ratelimit.Limits{Rate: 1e6, Burst: 1e6}},
		{"rate_and_cap", ratelimit.Limits{Rate: 1e6, Burst: 1e6, MaxConcurrency: 1 << 30}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b)})
			defer rdb.Close()
			buf := buffer.New(rdb, testenv.RedisPrefix(b))
			ctx := context.Background()
			if _, _, err := buf.Reconcile(ctx, "q", nil, time.Minute); err != nil {
				b.Fatal(err)
			}
			popped := 0
			for b.Loop() {
				if popped%1000 == 0 {
					b.StopTimer()
					fill(b, buf, 1000)
					rdb.Del(ctx, buf.RunningKey("q"))
					b.StartTimer()
				}
				if _, err := buf.Pop(ctx, "q", 1, bc.limits); err != nil {
					b.Fatal(err)
				}
				popped++
			}
		})
	}
}
