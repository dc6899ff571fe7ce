package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

// TestRateLimitHoldsAcrossThreeReplicas: rate 50/s, burst 10, 16 pollers spread over
// 3 serve processes. A token bucket allows at most burst + rate·t dispatches in any
// window of length t, and 16 pollers keep it drained, so a 10 s window must hold
// within [0.75·rate·t, burst + rate·(t + clockSlack)]. The upper bound is the
// guarantee; the lower one catches a bucket that refills too slowly (one bucket split
// over the three replicas would give a third). It leaves a quarter for the pollers'
// stalls on a loaded 2-core machine: at load 12 a run reached 0.83·rate·t.
//
// The window is read from attempts.started_at, which is PostgreSQL's clock when the
// claim's transaction began, not Redis's clock when the token left the bucket: each
// claim's lag between the two differs (pool waits, a loaded machine), so a 10 s window
// of started_at can hold the tokens of slightly more than 10 s. clockSlack bounds that
// difference. The window starts a second after the first dispatch, past the first
// claims, whose lag (cold connections and plans) differs most. One bucket per replica
// instead of one shared bucket would still give three times the upper bound.
func TestRateLimitHoldsAcrossThreeReplicas(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t)
	env := []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + testenv.RedisAddr(t),
		"TASKFORGE_REDIS_PREFIX=" + testenv.RedisPrefix(t),
		"TASKFORGE_DISPATCH_INTERVAL=100ms",
		"TASKFORGE_LOG_LEVEL=warn",
	}
	replicas := []*replica{startReplica(t, env), startReplica(t, env), startReplica(t, env)}
	urls := []string{replicas[0].URL, replicas[1].URL, replicas[2].URL}
	const rate, burst, window = 50.0, 10, 10 * time.Second
	const clockSlack = 200 * time.Millisecond
	const skip = time.Second // the first claims' part of the run, left out of the window
	if resp := testserver.Do(t, urls[0], "POST", "/queues", map[string]any{"name": "q", "rate_limit": rate, "rate_burst": burst}, nil); resp.Status != 201 {
		t.Fatalf("create queue: %d %s", resp.Status, resp.Body)
	}
	enqueueMany(t, urls[1], "q", 1500)
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	testserver.Eventually(t, 30*time.Second, "buffer filled", func() bool {
		var claimed int
		_ = conn.QueryRow(context.Background(), `SELECT count(*) FROM tasks WHERE status = 'claimed'`).Scan(&claimed)
		return claimed >= 1000
	})

	ctx, cancel := context.WithCancel(context.Background())
	l := newLedger()
	wg := runWorkers(ctx, 16, urls, "q", l)
	// The run lasts until a claim started a second past the window's end: every claim
	// of the window has then committed, and none is cut short by stopping the workers.
	// Each ack is a chance that such a claim came; the acks come at the rate limit.
	for past := false; !past; {
		if err := conn.QueryRow(context.Background(), `SELECT coalesce(max(started_at) >= min(started_at) + $1::interval, false) FROM all_attempts`,
			skip+window+time.Second).Scan(&past); err != nil {
			t.Fatal(err)
		}
		if !past {
			l.acks.WaitOrTimeout(t, "an ack while the rate-limited run goes on")
		}
	}
	cancel()
	wg.Wait()

	var first time.Time
	var inWindow int
	if err := conn.QueryRow(context.Background(), `SELECT min(started_at) FROM all_attempts`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	start := first.Add(skip)
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM all_attempts WHERE started_at >= $1 AND started_at < $2`,
		start, start.Add(window)).Scan(&inWindow); err != nil {
		t.Fatal(err)
	}
	low, high := int(0.75*rate*window.Seconds()), burst+int(rate*(window+clockSlack).Seconds())
	t.Logf("dispatched in %s: %d (bounds [%d, %d])", window, inWindow, low, high)
	if inWindow < low || inWindow > high {
		t.Fatalf("dispatched %d tasks in %s, want within [%d, %d]", inWindow, window, low, high)
	}
}
