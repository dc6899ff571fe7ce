package e2e_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

// TestRedisCluster: two serve processes on a three-master Redis Cluster
// (--redis-cluster through TASKFORGE_REDIS_CLUSTER) deliver every task of six
// queues, whose keys the hash tags spread over the masters, exactly once, keep a
// concurrency cap of two, wake a long poll on one replica for work enqueued on the
// other, and lose nothing when every master is flushed mid-run.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	rc := testenv.StartRedisCluster(t, 3)
	dbURL := testenv.NewDatabase(t)
	env := []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=" + rc.URL(),
		"TASKFORGE_REDIS_CLUSTER=true",
		"TASKFORGE_REDIS_PREFIX=tfcluster",
		"TASKFORGE_LEASE_TIMEOUT=5s",
		"TASKFORGE_HEARTBEAT_INTERVAL=1s",
		"TASKFORGE_WATCHDOG_INTERVAL=200ms",
		"TASKFORGE_DISPATCH_INTERVAL=100ms",
		"TASKFORGE_LOG_LEVEL=warn",
	}
	a := startReplica(t, env)
	b := startReplica(t, env)
	create := func(base string, body map[string]any) {
		t.Helper()
		if resp := testserver.Do(t, base, "POST", "/queues", body, nil); resp.Status != 201 {
			t.Fatalf("create queue %v: %d %s", body["name"], resp.Status, resp.Body)
		}
	}

	// A long poll parked on A wakes for a task enqueued through B: the wake-up
	// crosses the cluster's pub/sub.
	create(a.URL, map[string]any{"name": "wake"})
	woke := make(chan time.Duration, 1)
	go func() {
		var out struct {
			Tasks []polled `json:"tasks"`
		}
		start := time.Now()
		testserver.Do(t, a.URL, "POST", "/workers/poll", map[string]any{"worker_id": "parked", "queues": []string{"wake"},
			"wait_ms": 20000}, nil).JSON(t, &out)
		if len(out.Tasks) != 1 {
			t.Errorf("the parked poll returned %d tasks, want 1", len(out.Tasks))
		}
		woke <- time.Since(start)
	}()
	testserver.Eventually(t, 10*time.Second, "the poll parked", func() bool {
		workers, _ := testserver.Do(t, a.URL, "GET", "/workers", nil, nil).Map(t)["workers"].([]any)
		return len(workers) == 1
	})
	enqueued := time.Now()
	enqueueMany(t, b.URL, "wake", 1)
	select {
	case d := <-woke:
		t.Logf("parked poll on A answered %s after the enqueue on B (%s after it parked)", time.Since(enqueued), d)
	case <-time.After(30 * time.Second):
		t.Fatal("the parked poll never returned")
	}

	queues := []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	const perQueue = 300
	for i, q := range queues {
		base := []string{a.URL, b.URL}[i%2]
		create(base, map[string]any{"name": q})
		enqueueMany(t, base, q, perQueue)
	}
	create(a.URL, map[string]any{"name": "capped", "max_concurrency": 2})
	enqueueMany(t, b.URL, "capped", 200)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ledgers := map[string]*ledger{}
	var wgs []*sync.WaitGroup
	for _, q := range append(queues, "capped") {
		ledgers[q] = newLedger()
		wgs = append(wgs, runWorkers(ctx, 3, []string{a.URL, b.URL}, q, ledgers[q]))
	}
	waitAcked(t, ledgers["c0"], perQueue/3, 60*time.Second)

	// The queues' keys sit on more than one master.
	holding := 0
	for _, node := range rc.Nodes {
		c := redis.NewClient(&redis.Options{Addr: node.Addr})
		n, err := c.DBSize(ctx).Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			holding++
		}
	}
	if holding < 2 {
		t.Errorf("%d of %d masters hold keys: the cluster is not being spread over", holding, len(rc.Nodes))
	}
	for _, node := range rc.Nodes {
		node.Flush(t)
	}
	t.Logf("flushed every master after %d acks of c0; %d masters held keys", ledgers["c0"].acked.Load(), holding)

	for q, l := range ledgers {
		want := int64(perQueue)
		if q == "capped" {
			want = 200
		}
		waitAcked(t, l, want, 90*time.Second)
	}
	cancel()
	for _, wg := range wgs {
		wg.Wait()
	}
	for _, q := range queues {
		verifyAllDoneOnce(t, dbURL, q, perQueue)
	}
	verifyAllDoneOnce(t, dbURL, "capped", 200)

	// At no moment did more than two attempts of the capped queue overlap.
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var peak int
	if err := conn.QueryRow(context.Background(), `SELECT coalesce(max(n), 0) FROM (
		SELECT (SELECT count(*) FROM all_attempts b WHERE b.queue = 'capped'
			AND b.started_at <= a.started_at AND b.finished_at > a.started_at) AS n
		FROM all_attempts a WHERE a.queue = 'capped') s`).Scan(&peak); err != nil {
		t.Fatal(err)
	}
	if peak > 2 || peak < 1 {
		t.Errorf("up to %d attempts of the capped queue ran at once, want 1..2", peak)
	}
	t.Logf("capped queue: at most %d attempts at once", peak)
}
