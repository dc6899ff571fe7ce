package api_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/dispatcher"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/internal/testsignal"
	"github.com/taskforge/taskforge/server"
)

// drainers are the pollers drain runs.
type drainers struct {
	wg     sync.WaitGroup
	acked  atomic.Int64
	acks   testsignal.Signal[int64] // every ack, with the count so far
	claims testsignal.Signal[int]   // every poll that claimed tasks, with how many
	epoch  atomic.Int64             // a test's mark, read by each round as it begins
	rounds testsignal.Signal[round] // every round (a poll and its acks) done
}

// round is one poll of a drainer and the acks of what it claimed.
type round struct {
	worker int   // the drainer's index
	epoch  int64 // drainers.epoch when the round began
}

// waitRoundsSince waits until every one of n drainers has done a round that began
// at epoch or later.
func (d *drainers) waitRoundsSince(t *testing.T, n int, epoch int64, what string) {
	t.Helper()
	done := map[int]bool{}
	for len(done) < n {
		if r := d.rounds.WaitOrTimeout(t, what); r.epoch >= epoch {
			done[r.worker] = true
		}
	}
}

// waitAcked waits until the drainers have acked n tasks in all. It fails only when
// no ack comes for testsignal.Timeout, so a loaded machine slows it down without
// failing it.
func (d *drainers) waitAcked(t *testing.T, n int64, what string) {
	t.Helper()
	for c := d.acked.Load(); c < n; { // older acks still unread count less than n
		c = d.acks.WaitOrTimeout(t, fmt.Sprintf("%s: ack %d of %d", what, c+1, n))
	}
}

// drain runs n pollers against urls until ctx ends, holding each task for hold
// before acking it.
func drain(ctx context.Context, t *testing.T, urls []string, queue string, n, maxTasks int, hold time.Duration) *drainers {
	d := &drainers{}
	d.acks.Init()
	d.claims.Init()
	d.rounds.Init()
	wg, acked := &d.wg, &d.acked
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := urls[i%len(urls)]
			worker := fmt.Sprintf("w%d", i)
			for ctx.Err() == nil {
				epoch := d.epoch.Load()
				var out struct {
					Tasks []testserver.Polled `json:"tasks"`
				}
				resp := testserver.Do(t, base, "POST", "/workers/poll", map[string]any{
					"worker_id": worker, "queues": []string{queue}, "max_tasks": maxTasks, "wait_ms": 200}, nil)
				if resp.Status != 200 {
					t.Logf("poll: %d %s", resp.Status, resp.Body) // keep polling, as a worker would
					testenv.Elapse(50 * time.Millisecond)         // a worker's pause before it polls again
					continue
				}
				resp.JSON(t, &out)
				if len(out.Tasks) > 0 {
					d.claims.Signal(len(out.Tasks))
				}
				for _, p := range out.Tasks {
					testenv.Elapse(hold) // the work
					if r := testserver.Do(t, base, "POST", "/workers/ack", map[string]any{
						"worker_id": worker, "task_id": p.ID, "lease_token": p.LeaseToken}, nil); r.Status == 200 {
						d.acks.Signal(acked.Add(1))
					}
				}
				d.rounds.Signal(round{worker: i, epoch: epoch})
			}
		}()
	}
	return d
}

func dbConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestPauseStopsDispatchAndResumeRestartsIt(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	tasks := make([]map[string]any, 400)
	for i := range tasks {
		tasks[i] = map[string]any{"payload": i}
	}
	s.Must(201, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": tasks})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := drain(ctx, t, []string{s.URL}, "q", 4, 1, 5*time.Millisecond)
	d.waitAcked(t, 50, "some progress")

	var q map[string]any
	s.Must(200, "POST", "/queues/q/pause", nil).JSON(t, &q)
	if q["paused"] != true {
		t.Fatalf("pause: %v", q)
	}
	conn := dbConn(t, s.Config.DatabaseURL)
	var pausedAt time.Time
	if err := conn.QueryRow(ctx, "SELECT now()").Scan(&pausedAt); err != nil {
		t.Fatal(err)
	}
	// Observe a paused queue for longer than the 1 s bound: 20 of the dispatcher's
	// timed passes (one every 100 ms), each of which would dispatch it if it could.
	s.Signals.DispatchPass.Drain()
	for range 20 {
		s.Signals.DispatchPass.WaitFor(t, "a timed dispatcher pass while the queue is paused",
			func(p dispatcher.Pass) bool { return p.Timed })
	}
	var lastStart time.Time
	var started, done int
	if err := conn.QueryRow(ctx, `SELECT max(started_at), count(*) FROM all_attempts`).Scan(&lastStart, &started); err != nil {
		t.Fatal(err)
	}
	if lastStart.After(pausedAt.Add(time.Second)) {
		t.Fatalf("an attempt started %s after the pause", lastStart.Sub(pausedAt))
	}
	t.Logf("last attempt started %s after the pause; %d of 400 started", lastStart.Sub(pausedAt), started)
	if started >= 400 {
		t.Fatal("every task ran before the pause: the test proves nothing")
	}

	s.Must(200, "POST", "/queues/q/resume", nil)
	d.waitAcked(t, 400, "all done after resume")
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM all_tasks WHERE status = 'done'`).Scan(&done); err != nil || done != 400 {
		t.Fatalf("%d of 400 tasks done after 400 acks (%v)", done, err)
	}
	cancel()
	d.wg.Wait()
	if code := s.Must(404, "POST", "/queues/nope/pause", nil).ErrorCode(t); code != "queue_not_found" {
		t.Fatalf("pause missing queue: %q", code)
	}
}

// agingRun enqueues one priority-10 task, then a flood of priority-1 tasks (20 every
// 50 ms for 2 s) while one slow worker drains the queue, and returns the p10 task's
// start time with the creation and start times of every p1 task.
func agingRun(t *testing.T, settings map[string]any) (p10Created, p10Start time.Time, p1 [][2]time.Time) {
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", settings)
	flood := func(withLow bool) []testserver.Task {
		batch := make([]map[string]any, 20, 21)
		for j := range batch {
			batch[j] = map[string]any{"payload": "high", "priority": 1}
		}
		if withLow {
			batch = append([]map[string]any{{"payload": "low", "priority": 10}}, batch...)
		}
		var out struct {
			Tasks []testserver.Task `json:"tasks"`
		}
		s.Must(201, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": batch}).JSON(t, &out)
		return out.Tasks
	}
	// The low-priority task arrives with the first wave, before any worker runs.
	low := flood(true)[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := drain(ctx, t, []string{s.URL}, "q", 1, 1, 3*time.Millisecond)
	for i := 1; i < 40; i++ {
		testenv.Elapse(50 * time.Millisecond) // the flood's pace: tasks of different ages are the point
		flood(false)
	}
	conn := dbConn(t, s.Config.DatabaseURL)
	d.waitAcked(t, 1+40*20, "queue drained")
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE status <> 'done'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d tasks not done after every ack (%v)", left, err)
	}
	cancel()
	d.wg.Wait()
	ctx = context.Background()
	if err := conn.QueryRow(ctx, `SELECT t.created_at, a.started_at FROM all_tasks t JOIN all_attempts a ON a.task_id = t.id WHERE t.id = $1`, low.ID).Scan(&p10Created, &p10Start); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT t.created_at, a.started_at FROM all_tasks t JOIN all_attempts a ON a.task_id = t.id WHERE t.priority = 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c, st time.Time
		if err := rows.Scan(&c, &st); err != nil {
			t.Fatal(err)
		}
		p1 = append(p1, [2]time.Time{c, st})
	}
	return p10Created, p10Start, p1
}

func TestPriorityAgingServesOldLowPriorityTask(t *testing.T) {
	t.Parallel()
	const aging = 100 * time.Millisecond
	created, start, p1 := agingRun(t, map[string]any{"priority_aging_ms": aging.Milliseconds()})
	bound := created.Add(9*aging + 2*time.Millisecond) // 9 levels of aging; ms score granularity
	overtook, servedBefore := 0, 0
	for _, h := range p1 {
		if h[0].After(bound) && h[1].Before(start) {
			overtook++
		}
		if h[1].Before(start) {
			servedBefore++
		}
	}
	t.Logf("priority-10 task waited %s; %d of %d priority-1 tasks ran before it", start.Sub(created), servedBefore, len(p1))
	if overtook > 0 {
		t.Fatalf("%d priority-1 tasks enqueued more than 9×%s after the priority-10 task ran before it", overtook, aging)
	}
	if servedBefore == len(p1) {
		t.Fatal("the priority-10 task ran last: aging had no effect")
	}
}

func TestStrictPriorityWithoutAging(t *testing.T) {
	t.Parallel()
	created, start, p1 := agingRun(t, nil)
	after := 0
	for _, h := range p1 {
		if h[1].After(start) {
			after++
		}
	}
	t.Logf("priority-10 task waited %s behind %d priority-1 tasks", start.Sub(created), len(p1)-after)
	if after > 0 {
		t.Fatalf("%d priority-1 tasks ran after the priority-10 task under strict priority", after)
	}
}

func TestConcurrencyCapAcrossReplicasHealsAfterFlushAndCrash(t *testing.T) {
	t.Parallel()
	redisServer := testenv.StartRedisServer(t)
	short := func(c *server.Config) {
		c.LeaseTimeout = time.Second
		c.HeartbeatInterval = 200 * time.Millisecond
		c.WatchdogInterval = 100 * time.Millisecond
	}
	a := testserver.Start(t, testserver.Options{RedisAddr: redisServer.Addr, Configure: short})
	b := testserver.Start(t, testserver.Options{RedisAddr: redisServer.Addr, DatabaseURL: a.Config.DatabaseURL,
		RedisPrefix: a.Config.RedisPrefix, Configure: short})
	a.CreateQueue("q", map[string]any{"max_concurrency": 3})
	tasks := make([]map[string]any, 300)
	for i := range tasks {
		tasks[i] = map[string]any{"payload": i}
	}
	a.Must(201, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": tasks})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := dbConn(t, a.Config.DatabaseURL)
	var mu sync.Mutex
	phase := "steady"
	peak := map[string]int{}
	sampler := dbConn(t, a.Config.DatabaseURL)
	setPhase := func(p string) { mu.Lock(); phase = p; mu.Unlock() }

	// A worker that dies holding a slot: it takes one task and never answers.
	var crashed []testserver.Polled
	for len(crashed) == 0 {
		crashed = a.Poll("doomed", []string{"q"}, 1, 2000)
	}
	const drainerCount = 16
	d := drain(ctx, t, []string{a.URL, b.URL}, "q", drainerCount, 10, 10*time.Millisecond)
	sampled := make(chan struct{})
	// Stop the sampler before its connection closes, even when the test fails early
	// (cleanups run last registered first).
	t.Cleanup(func() { cancel(); <-sampled })
	go func() { // sample executing tasks from PostgreSQL after every claim: when the count rises
		defer close(sampled)
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.claims.C():
			}
			var n int
			if err := sampler.QueryRow(ctx, `SELECT count(*) FROM all_tasks WHERE status = 'executing'`).Scan(&n); err == nil {
				mu.Lock()
				peak[phase] = max(peak[phase], n)
				mu.Unlock()
			}
		}
	}()
	d.waitAcked(t, 60, "progress")

	setPhase("flush")
	if err := a.Redis.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The transition after losing every slot, excluded from the peaks: claims in
	// flight at the flush took slots the flush then lost. It is over once every
	// drainer has done a whole round (its poll, whose first pop rebuilds the slots,
	// and its acks) that began after the flush.
	d.waitRoundsSince(t, drainerCount, d.epoch.Add(1), "a round of every drainer after the flush")
	setPhase("healed")
	testserver.Eventually(t, 90*time.Second, "all done", func() bool {
		var done int
		_ = conn.QueryRow(ctx, `SELECT count(*) FROM all_tasks WHERE status = 'done'`).Scan(&done)
		if done != 300 {
			var byStatus string
			_ = conn.QueryRow(ctx, `SELECT string_agg(status || '=' || n, ' ') FROM (SELECT status, count(*) n FROM all_tasks GROUP BY status) s`).Scan(&byStatus)
			slots := a.Redis.ZCard(ctx, a.Server.Buffer.RunningKey("q")).Val()
			buffered := a.Redis.ZCard(ctx, a.Server.Buffer.Key("q")).Val()
			t.Logf("tasks %s; slots %d; buffered %d", byStatus, slots, buffered)
		}
		return done == 300
	})
	cancel()
	d.wg.Wait()
	<-sampled
	t.Logf("peak executing: %v", peak)
	if peak["steady"] > 3 || peak["healed"] > 3 {
		t.Fatalf("more than 3 tasks executing under max_concurrency 3: %v", peak)
	}
	if peak["steady"] < 3 {
		t.Fatalf("the cap was never reached (peak %d): the test proves nothing", peak["steady"])
	}
	h := a.Task("q", crashed[0].ID).AttemptHistory
	if len(h) != 2 || h[0].Status != "abandoned" || h[1].Status != "succeeded" {
		t.Fatalf("the crashed worker's task: %+v", h)
	}
	// A slot can outlive its task briefly (a rebuild that raced the task's ack);
	// the dispatcher's reconcile frees it once it is older than buffer.SlotGrace.
	testserver.Eventually(t, 3*buffer.SlotGrace+5*time.Second, "every slot freed", func() bool {
		return a.Redis.ZCard(context.Background(), a.Server.Buffer.RunningKey("q")).Val() == 0
	})
	_ = http.StatusOK
}
