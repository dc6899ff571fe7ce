package backfill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/internal/backfill"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// liveTasks is how many finished tasks TestMoveBesideALiveQueue moves:
// $TASKFORGE_BACKFILL_TASKS, or 20,000 (a few seconds; `make backfill-test` runs a
// million).
func liveTasks(t *testing.T) int {
	v := os.Getenv("TASKFORGE_BACKFILL_TASKS")
	if v == "" {
		return 20000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("$TASKFORGE_BACKFILL_TASKS=%q: want a positive number", v)
	}
	return n
}

// insertFinishedFast writes n finished tasks of an older release (done, cancelled,
// dead over the last three days, one attempt each; ids of version 7 in order of
// creation, as serve makes them) the fast way: triggers off for
// the load (as a restore would), then their counts into the tally in one row per
// (queue, status), then ANALYZE as autovacuum would.
func insertFinishedFast(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, sql := range []string{
		`BEGIN`,
		`SET LOCAL session_replication_role = replica`,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
			created_at, updated_at, finished_at)
		SELECT (lpad(to_hex((extract(epoch FROM f) * 1000)::int8), 12, '0') || '7' || substr(h, 1, 3) || '8'
				|| substr(h, 4, 15))::uuid,
			CASE WHEN i % 2 = 0 THEN 'q' ELSE 'other' END, '{"n":1}', 5,
			(ARRAY['done', 'done', 'cancelled', 'dead'])[1 + i % 4], f - interval '1 minute', 1, 3,
			f - interval '1 minute', f, f
		FROM generate_series(1, ` + strconv.Itoa(n) + `) AS i,
			LATERAL (SELECT now() - interval '3 days' + i * (interval '3 days' / ` + strconv.Itoa(n) + `) AS f,
				md5(i::text) AS h) x`,
		`INSERT INTO attempts (task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at)
		SELECT id, 1, queue, 'w', gen_random_uuid(),
			CASE status WHEN 'done' THEN 'succeeded' WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END,
			created_at, finished_at FROM tasks`,
		`INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
		SELECT queue, status, '-infinity', count(*) FROM tasks GROUP BY 1, 2`,
		`COMMIT`,
		`ANALYZE tasks, attempts`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%.60s: %v", sql, err)
		}
	}
}

// latencies of one kind of live call.
type latencies []time.Duration

func (l latencies) at(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// TestMoveBesideALiveQueue: a database holding finished tasks of an older release
// moves them all into history while a live queue keeps enqueueing, claiming and
// acking beside it: every task ends exactly once in tasks or history, the tally is
// exact, and the live calls are not held up by the move (each stays under the
// mover's batch timeout; the test logs their p50, p99 and max).
func TestMoveBesideALiveQueue(t *testing.T) {
	t.Parallel()
	n := liveTasks(t)
	pool, store := setup(t)
	start := time.Now()
	insertFinishedFast(t, pool, n)
	t.Logf("%d finished tasks written in %s", n, time.Since(start).Round(time.Millisecond))
	if got := count(t, pool, `SELECT count(*) FROM tasks WHERE status IN ('done', 'cancelled', 'dead')`); got != int64(n) {
		t.Fatalf("%d finished tasks written, want %d", got, n)
	}
	ctx := context.Background()
	// The live queue's calls go over a hot-path pool, as serve's do.
	live, err := storage.Connect(ctx, pool.Config().ConnString(), 4, storage.HotPathSettings())
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	liveStore := storage.New(pool, storage.WithHotPool(live))
	if _, err := liveStore.CreateQueue(ctx, storage.Queue{Name: "live", MaxRetries: 3, BackoffBaseMs: 1000, BackoffMaxMs: 3600000}); err != nil {
		t.Fatal(err)
	}

	type calls struct{ enq, claim, ack latencies }
	// cycle is one worker's path, call after call: enqueue, dispatch, claim, ack.
	cycle := func(c *calls) error {
		t0 := time.Now()
		if _, err := liveStore.Enqueue(ctx, "live", []storage.NewTask{{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{"n":1}`), Priority: 5}}, nil); err != nil {
			return err
		}
		c.enq = append(c.enq, time.Since(t0))
		due, err := liveStore.DispatchDue(ctx, "live", 10, 1e13)
		if err != nil {
			return err
		}
		ids := make([]uuid.UUID, len(due))
		for i, d := range due {
			ids[i] = d.ID
		}
		t0 = time.Now()
		claimed, err := testenv.Claim(ctx, liveStore, ids, "w", time.Minute)
		if err != nil {
			return err
		}
		c.claim = append(c.claim, time.Since(t0))
		for _, task := range claimed {
			t0 = time.Now()
			if _, err := liveStore.Ack(ctx, "w", task.ID, *task.LeaseToken, nil); err != nil {
				return err
			}
			c.ack = append(c.ack, time.Since(t0))
		}
		return nil
	}
	var baseline, during calls
	const baselineCycles = 200
	for range baselineCycles {
		if err := cycle(&baseline); err != nil {
			t.Fatalf("live queue before the move: %v", err)
		}
	}
	before := take(t, pool)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var cycles int
	var liveErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if liveErr = cycle(&during); liveErr != nil {
				return
			}
			cycles++
		}
	}()

	m := backfill.New(store, backfill.Config{}, quiet)
	p, err := m.MoveAll(ctx)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if liveErr != nil {
		t.Fatalf("live queue: %v", liveErr)
	}
	t.Logf("moved %d tasks and %d attempts in %s (%.0f/s) in %d batches, beside %d live enqueue/claim/ack cycles",
		p.Moved, p.Attempts, p.Elapsed.Round(time.Millisecond), p.Rate(), p.Batches, cycles)
	for _, c := range []struct {
		name   string
		before latencies
		l      latencies
	}{{"enqueue", baseline.enq, during.enq}, {"claim", baseline.claim, during.claim}, {"ack", baseline.ack, during.ack}} {
		t.Logf("live %s, before → during the move: %d → %d calls, p50 %s → %s, p99 %s → %s, max %s → %s", c.name,
			len(c.before), len(c.l), ms(c.before.at(0.5)), ms(c.l.at(0.5)), ms(c.before.at(0.99)), ms(c.l.at(0.99)),
			ms(c.before.at(1)), ms(c.l.at(1)))
		if len(c.l) == 0 {
			t.Errorf("no live %s ran beside the move", c.name)
		}
		if c.l.at(1) >= 10*time.Second {
			t.Errorf("a live %s waited %s, as long as a batch may run: the move blocked it", c.name, c.l.at(1))
		}
	}
	if p.Moved < int64(n) {
		t.Errorf("moved %d, want at least the %d old finished tasks", p.Moved, n)
	}
	// The live tasks were acked: done, in tasks or in history (moved by their ack,
	// or by the mover when they finished before its pass got there).
	before.tasks += int64(cycles)
	before.finished += int64(cycles)
	before.attempts += int64(cycles)
	before.finishedAttempts += int64(cycles)
	if left := count(t, pool, `SELECT count(*) FROM tasks WHERE status IN ('done', 'cancelled', 'dead')`); left > 0 {
		// Acked behind the pass: a later run takes them.
		if _, err := m.MoveAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkMoved(t, pool, before)
}
