package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

// TestScheduleLateness measures how late the ticks of an @every 1s schedule reach
// a worker: three `taskforge serve` replicas (TASKFORGE_E2E_LATENESS_REPLICAS), one
// worker long-polling the queue
// (a request always waiting at one replica), TASKFORGE_E2E_LATENESS_TICKS ticks
// (skipped when unset; docs/benchmarks.md records runs of 90). It logs, per tick,
// the percentiles of tick → insert of its task, → its claim (the attempt's start,
// database clock) and → the worker's receipt, and those of the replicas'
// taskforge_schedule_lateness_seconds histograms summed; and, as a baseline in the
// same run, enqueue → claim of a plain task enqueued once a second on another
// replica into another queue the worker polls. It fails when a tick
// reaches the worker 1 s or more after its time at the 99th percentile.
func TestScheduleLateness(t *testing.T) {
	v := os.Getenv("TASKFORGE_E2E_LATENESS_TICKS")
	if v == "" {
		t.Skip("a measurement of a minute or more: set TASKFORGE_E2E_LATENESS_TICKS=90 to run it")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 10 {
		t.Fatalf("TASKFORGE_E2E_LATENESS_TICKS=%q: want an integer of at least 10", v)
	}
	dbURL := testenv.NewDatabase(t)
	env := []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + testenv.RedisAddr(t),
		"TASKFORGE_REDIS_PREFIX=" + testenv.RedisPrefix(t),
		"TASKFORGE_LOG_LEVEL=warn",
	}
	count := 3 // TASKFORGE_E2E_LATENESS_REPLICAS: 1 to 3
	if v := os.Getenv("TASKFORGE_E2E_LATENESS_REPLICAS"); v != "" {
		if count, err = strconv.Atoi(v); err != nil || count < 1 || count > 3 {
			t.Fatalf("TASKFORGE_E2E_LATENESS_REPLICAS=%q: want 1, 2 or 3", v)
		}
	}
	var replicas []*replica
	for range count {
		replicas = append(replicas, startReplica(t, env))
	}
	at := func(i int) *replica { return replicas[i%count] }
	for _, q := range []string{"cron", "plain"} {
		if resp := testserver.Do(t, replicas[0].URL, "POST", "/queues", map[string]any{"name": q}, nil); resp.Status != 201 {
			t.Fatalf("create queue %s: %d %s", q, resp.Status, resp.Body)
		}
	}
	api, err := client.New(at(2).URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	received := map[string]time.Time{} // task id → when the worker got it
	ticks := 0                         // of them, the schedule's
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			res, err := api.Poll(ctx, client.PollRequest{WorkerID: "lateness", Queues: []string{"cron", "plain"}, Wait: 30 * time.Second})
			at := time.Now()
			if err != nil {
				continue
			}
			for _, task := range res.Tasks {
				mu.Lock()
				received[task.ID] = at
				if task.Queue == "cron" {
					ticks++
				}
				mu.Unlock()
				_, _ = api.Ack(ctx, "lateness", task.ID, task.LeaseToken, nil)
			}
		}
	}()
	defer func() {
		stop()
		<-done
	}()
	resp := testserver.Do(t, at(1).URL, "POST", "/schedules", map[string]any{
		"name": "lateness", "queue": "cron", "cron": "@every 1s", "payload": map[string]any{}}, nil)
	if resp.Status != 201 {
		t.Fatalf("create schedule: %d %s", resp.Status, resp.Body)
	}
	// The baseline in the same run: a plain task enqueued on another replica once a
	// second, taken by the same worker.
	producer, err := client.New(replicas[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_, _ = producer.Enqueue(ctx, "plain", client.NewTask{Payload: map[string]any{}})
			}
		}
	}()
	loadBefore := loadAverage()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	testserver.Eventually(t, time.Duration(n+30)*time.Second, fmt.Sprintf("%d ticks received", n), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ticks >= n
	})
	if resp := testserver.Do(t, replicas[0].URL, "PATCH", "/schedules/lateness", map[string]any{"paused": true}, nil); resp.Status != 200 {
		t.Fatalf("pause: %d %s", resp.Status, resp.Body)
	}

	rows, err := conn.Query(context.Background(), `SELECT t.id::text, t.scheduled_at, t.created_at, a.started_at
		FROM all_tasks t JOIN all_attempts a ON a.task_id = t.id AND a.attempt = 1
		WHERE t.schedule = 'lateness' ORDER BY t.scheduled_at`)
	if err != nil {
		t.Fatal(err)
	}
	var insert, claim, receipt []time.Duration
	var id string
	var tick, created, started time.Time
	mu.Lock()
	_, err = pgx.ForEachRow(rows, []any{&id, &tick, &created, &started}, func() error {
		if at, ok := received[id]; ok {
			insert = append(insert, created.Sub(tick))
			claim = append(claim, started.Sub(tick))
			receipt = append(receipt, at.Sub(tick))
		}
		return nil
	})
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	rows, err = conn.Query(context.Background(), `SELECT extract(epoch FROM a.started_at - t.created_at)::float8
		FROM all_tasks t JOIN all_attempts a ON a.task_id = t.id AND a.attempt = 1 WHERE t.queue = 'plain'`)
	if err != nil {
		t.Fatal(err)
	}
	plainSecs, err := pgx.CollectRows(rows, pgx.RowTo[float64])
	if err != nil {
		t.Fatal(err)
	}
	plain := make([]time.Duration, len(plainSecs))
	for i, s := range plainSecs {
		plain[i] = time.Duration(s * float64(time.Second))
	}
	if len(receipt) < n || len(plain) == 0 {
		t.Fatalf("%d ticks with a task, an attempt and a receipt, want %d", len(receipt), n)
	}
	line := func(name string, d []time.Duration) string {
		slices.Sort(d)
		return fmt.Sprintf("%-28s p50 %7.1f  p95 %7.1f  p99 %7.1f  max %7.1f ms", name, ms(pctDur(d, 50)), ms(pctDur(d, 95)),
			ms(pctDur(d, 99)), ms(d[len(d)-1]))
	}
	hist := scrapeLateness(t, replicas)
	t.Logf("%d ticks of @every 1s, %d replicas, one long-polling worker; load %s before, %s after\n  %s\n  %s\n  %s\n  %s\n  %s",
		len(receipt), count, loadBefore, loadAverage(), line("tick → insert (created_at)", insert),
		line("tick → claim (attempt start)", claim), line("tick → worker receipt", receipt), hist,
		line(fmt.Sprintf("plain enqueue → claim (%d)", len(plain)), plain))
	if p99 := pctDur(receipt, 99); p99 >= time.Second {
		t.Errorf("tick → worker receipt p99 %s, want under 1 s", p99)
	}
}

// scrapeLateness sums the replicas' taskforge_schedule_lateness_seconds buckets and
// describes the sum: its count and the bucket bound of its p50, p95 and p99.
func scrapeLateness(t *testing.T, replicas []*replica) string {
	t.Helper()
	sum := map[float64]float64{}
	for _, r := range replicas {
		resp, err := http.Get(r.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if !strings.HasPrefix(l, `taskforge_schedule_lateness_seconds_bucket{le="`) {
				continue
			}
			rest := strings.TrimPrefix(l, `taskforge_schedule_lateness_seconds_bucket{le="`)
			le, count, ok := strings.Cut(rest, `"} `)
			if !ok {
				continue
			}
			bound, err1 := strconv.ParseFloat(le, 64)
			c, err2 := strconv.ParseFloat(count, 64)
			if err1 == nil && err2 == nil {
				sum[bound] += c
			}
		}
		resp.Body.Close()
	}
	bounds := make([]float64, 0, len(sum))
	for b := range sum {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		t.Fatal("no taskforge_schedule_lateness_seconds buckets in /metrics")
	}
	total := sum[bounds[len(bounds)-1]]
	at := func(p float64) string {
		for _, b := range bounds {
			if sum[b] >= p*total {
				return fmt.Sprintf("≤ %g ms", b*1000)
			}
		}
		return "?"
	}
	return fmt.Sprintf("%-28s p50 %s, p95 %s, p99 %s (%g ticks, buckets a factor of 2 apart)",
		"metric (tick → commit)", at(0.50), at(0.95), at(0.99), total)
}
