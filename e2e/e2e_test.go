// Package e2e_test drives whole TaskForge replicas, in-process and as separate
// processes, through concurrency, Redis data loss and replica crashes, then checks
// PostgreSQL directly for TaskForge's invariants (no task lost, one valid lease at
// a time, a done task never runs again).
package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// enqueueMany enqueues n tasks in batches of 500 with mixed priorities.
func enqueueMany(t *testing.T, base, queue string, n int) {
	t.Helper()
	for start := 0; start < n; start += 500 {
		batch := make([]map[string]any, 0, 500)
		for i := start; i < min(n, start+500); i++ {
			batch = append(batch, map[string]any{"payload": map[string]any{"i": i}, "priority": 1 + i%10})
		}
		resp := testserver.Do(t, base, "POST", "/queues/"+queue+"/tasks/batch", map[string]any{"tasks": batch}, nil)
		if resp.Status != http.StatusCreated {
			t.Fatalf("batch enqueue: %d %s", resp.Status, resp.Body)
		}
	}
}

// verifyAllDoneOnce checks, in PostgreSQL, that every task of queue is done with
// exactly one succeeded attempt, that attempt numbers are contiguous from 1, and that
// no two attempts of one task overlap (at most one valid lease at a time).
func verifyAllDoneOnce(t *testing.T, dbURL, queue string, want int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	checks := []struct {
		what  string
		query string
		want  int
	}{
		{"tasks", `SELECT count(*) FROM all_tasks WHERE queue = $1`, want},
		{"tasks not done", `SELECT count(*) FROM all_tasks WHERE queue = $1 AND status <> 'done'`, 0},
		{"tasks without exactly one succeeded attempt", `SELECT count(*) FROM all_tasks t WHERE queue = $1 AND
			(SELECT count(*) FROM all_attempts a WHERE a.task_id = t.id AND a.status = 'succeeded') <> 1`, 0},
		{"tasks with gaps in attempt numbers", `SELECT count(*) FROM all_tasks t WHERE queue = $1 AND
			(SELECT max(attempt) - count(*) FROM all_attempts a WHERE a.task_id = t.id) <> 0`, 0},
		{"attempts still executing", `SELECT count(*) FROM all_attempts WHERE queue = $1 AND status = 'executing'`, 0},
		{"overlapping attempts", `SELECT count(*) FROM all_attempts a JOIN all_attempts b
			ON a.task_id = b.task_id AND b.attempt = a.attempt + 1
			WHERE a.queue = $1 AND b.started_at < a.finished_at`, 0},
	}
	for _, c := range checks {
		var got int
		if err := conn.QueryRow(ctx, c.query, queue).Scan(&got); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		t.Logf("%s: %d", c.what, got)
		if got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
}

func waitAcked(t *testing.T, l *ledger, n int64, timeout time.Duration) {
	t.Helper()
	testserver.Eventually(t, timeout, fmt.Sprintf("%d acks", n), func() bool { return l.acked.Load() >= n })
}

func TestSixteenPollersDeliverEachTaskOnce(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) { c.LeaseTimeout = 30 * time.Second }})
	s.CreateQueue("q", nil)
	const n = 2000
	enqueueMany(t, s.URL, "q", n)

	ctx, cancel := context.WithCancel(context.Background())
	l := newLedger()
	wg := runWorkers(ctx, 16, []string{s.URL}, "q", l)
	waitAcked(t, l, n, 90*time.Second)
	cancel()
	wg.Wait()

	if len(l.deliveries) != n {
		t.Fatalf("%d distinct tasks delivered, want %d", len(l.deliveries), n)
	}
	for id, times := range l.deliveries {
		if times != 1 {
			t.Fatalf("task %s delivered %d times", id, times)
		}
	}
	if len(l.ackErrors) != 0 {
		t.Fatalf("acks refused: %v", l.ackErrors)
	}
	verifyAllDoneOnce(t, s.Config.DatabaseURL, "q", n)
}

func TestRedisFlushAllLosesNothing(t *testing.T) {
	t.Parallel()
	redisServer := testenv.StartRedisServer(t)
	s := testserver.Start(t, testserver.Options{RedisAddr: redisServer.Addr})
	s.CreateQueue("q", nil)
	const n = 1500
	enqueueMany(t, s.URL, "q", n)

	ctx, cancel := context.WithCancel(context.Background())
	l := newLedger()
	wg := runWorkers(ctx, 8, []string{s.URL}, "q", l)
	waitAcked(t, l, 300, 60*time.Second)
	if err := s.Redis.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("FLUSHALL after %d acks", l.acked.Load())
	waitAcked(t, l, n, 90*time.Second)
	cancel()
	wg.Wait()
	verifyAllDoneOnce(t, s.Config.DatabaseURL, "q", n)
}
