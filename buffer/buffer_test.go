package buffer_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backends runs fn against real Redis and against miniredis (the embedded dev mode).
func backends(t *testing.T, fn func(t *testing.T, b *buffer.Buffer)) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
		t.Cleanup(func() { _ = rdb.Close() })
		fn(t, buffer.New(rdb, testenv.RedisPrefix(t)))
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		fn(t, buffer.New(rdb, "tf"))
	})
}

func TestPopOrdersByPriorityThenEligibleTime(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		ctx := context.Background()
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		in := []storage.Buffered{
			{ID: uuid.New(), Priority: 5, ScheduledAt: base},
			{ID: uuid.New(), Priority: 1, ScheduledAt: base.Add(time.Hour)},
			{ID: uuid.New(), Priority: 10, ScheduledAt: base.Add(-24 * time.Hour)},
			{ID: uuid.New(), Priority: 1, ScheduledAt: base},
			{ID: uuid.New(), Priority: 5, ScheduledAt: base.Add(time.Millisecond)},
		}
		if err := b.Add(ctx, "q", in, buffer.LevelWeightMs(0)); err != nil {
			t.Fatal(err)
		}
		want := []uuid.UUID{in[3].ID, in[1].ID, in[0].ID, in[4].ID, in[2].ID}
		var got []uuid.UUID
		for len(got) < len(want) {
			popped, err := b.Pop(ctx, "q", 2, ratelimit.Limits{})
			if err != nil || len(popped.Entries) == 0 {
				t.Fatalf("pop: %v %v", popped, err)
			}
			for _, e := range popped.Entries {
				got = append(got, e.ID)
			}
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("pop order %d: got %s want %s", i, got[i], want[i])
			}
		}
		if popped, err := b.Pop(ctx, "q", 5, ratelimit.Limits{}); err != nil || len(popped.Entries) != 0 {
			t.Fatalf("empty buffer popped %v %v", popped, err)
		}
	})
}

func TestMissingAndPutback(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		ctx := context.Background()
		tasks := []storage.Buffered{{ID: uuid.New(), Priority: 1, ScheduledAt: time.Now()}, {ID: uuid.New(), Priority: 2, ScheduledAt: time.Now()}}
		if err := b.Add(ctx, "q", tasks, buffer.LevelWeightMs(0)); err != nil {
			t.Fatal(err)
		}
		res, err := b.Pop(ctx, "q", 1, ratelimit.Limits{})
		popped := res.Entries
		if err != nil || len(popped) != 1 || popped[0].ID != tasks[0].ID {
			t.Fatalf("pop: %v %v", popped, err)
		}
		missing, err := b.MissingOf(ctx, []storage.BufferedTask{{Queue: "q", Buffered: tasks[0]}, {Queue: "q", Buffered: tasks[1]}})
		if err != nil || len(missing) != 1 || missing[0].ID != tasks[0].ID {
			t.Fatalf("missing: %v %v", missing, err)
		}
		if err := b.Putback(ctx, "q", popped); err != nil {
			t.Fatal(err)
		}
		res, err = b.Pop(ctx, "q", 1, ratelimit.Limits{})
		again := res.Entries
		if err != nil || len(again) != 1 || again[0].ID != tasks[0].ID {
			t.Fatalf("put back entry not first: %v %v", again, err)
		}
		sizes, err := b.Sizes(ctx, []string{"q", "other"})
		if err != nil || sizes["q"] != 1 || sizes["other"] != 0 {
			t.Fatalf("sizes: %v %v", sizes, err)
		}
	})
}

func TestParseWake(t *testing.T) {
	for _, tc := range []struct {
		in    string
		queue string
		n     int
		ok    bool
	}{{"emails:3", "emails", 3, true}, {"a.b-c:1", "a.b-c", 1, true}, {"x", "", 0, false}, {"x:0", "", 0, false}, {"x:y", "", 0, false}} {
		q, n, ok := buffer.ParseWake(tc.in)
		if q != tc.queue || n != tc.n || ok != tc.ok {
			t.Errorf("ParseWake(%q) = %q %d %v", tc.in, q, n, ok)
		}
	}
}

func BenchmarkPop(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b)})
	defer rdb.Close()
	buf := buffer.New(rdb, testenv.RedisPrefix(b))
	ctx := context.Background()
	batch := make([]storage.Buffered, 1000)
	popped := 0
	for b.Loop() {
		if popped%1000 == 0 {
			b.StopTimer()
			for i := range batch {
				batch[i] = storage.Buffered{ID: uuid.New(), Priority: 1 + i%10, ScheduledAt: time.Now()}
			}
			if err := buf.Add(ctx, "q", batch, buffer.LevelWeightMs(0)); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		if _, err := buf.Pop(ctx, "q", 1, ratelimit.Limits{}); err != nil {
			b.Fatal(err)
		}
		popped++
	}
}

// A stale duplicate (an id already holding a concurrency slot) is dropped by the
// pop without spending a rate-limit token: it hands no work out, so the token stays
// for the next real task.
func TestStaleDuplicateSpendsNoToken(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		ctx := context.Background()
		// Two tokens and a refill far slower than the test, so every token is counted.
		limits := ratelimit.Limits{Rate: 0.001, Burst: 2, MaxConcurrency: 5}
		if _, _, err := b.Reconcile(ctx, "q", nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		running := storage.Buffered{ID: uuid.New(), Priority: 5, ScheduledAt: now}
		fresh := storage.Buffered{ID: uuid.New(), Priority: 5, ScheduledAt: now.Add(time.Second)}
		if err := b.Add(ctx, "q", []storage.Buffered{running, fresh}, buffer.LevelWeightMs(0)); err != nil {
			t.Fatal(err)
		}
		first, err := b.Pop(ctx, "q", 1, limits) // the first token
		if err != nil || len(first.Entries) != 1 || first.Entries[0].ID != running.ID {
			t.Fatalf("first pop: %+v %v", first, err)
		}
		// The buffer repair re-adds the running task's id, ahead of the fresh one.
		dup := storage.Buffered{ID: running.ID, Priority: 1, ScheduledAt: now}
		if err := b.Add(ctx, "q", []storage.Buffered{dup}, buffer.LevelWeightMs(0)); err != nil {
			t.Fatal(err)
		}
		stale, err := b.Pop(ctx, "q", 1, limits)
		if err != nil || len(stale.Entries) != 0 {
			t.Fatalf("the stale duplicate was handed out: %+v %v", stale, err)
		}
		last, err := b.Pop(ctx, "q", 1, limits) // the second token, still there
		if err != nil || len(last.Entries) != 1 || last.Entries[0].ID != fresh.ID {
			t.Fatalf("the fresh task was held back (a token spent on the duplicate?): %+v %v", last, err)
		}
	})
}
