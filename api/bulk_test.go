package api_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskforge/taskforge/api"
	"github.com/taskforge/taskforge/internal/testserver"
)

// fill enqueues n tasks into queue, 1,000 a request, and returns their ids.
func fill(t *testing.T, s *testserver.Instance, queue string, n int, extra map[string]any) []string {
	t.Helper()
	var ids []string
	for len(ids) < n {
		tasks := make([]map[string]any, min(1000, n-len(ids)))
		for i := range tasks {
			task := map[string]any{"payload": len(ids) + i}
			for k, v := range extra {
				task[k] = v
			}
			tasks[i] = task
		}
		var out struct {
			Tasks []testserver.Task `json:"tasks"`
		}
		s.Must(201, "POST", "/queues/"+queue+"/tasks/batch", map[string]any{"tasks": tasks}).JSON(t, &out)
		for _, task := range out.Tasks {
			ids = append(ids, task.ID)
		}
	}
	return ids
}

// statusCounts counts queue's tasks by status in PostgreSQL.
func statusCounts(t *testing.T, dbURL, queue string) map[string]int {
	t.Helper()
	conn := dbConn(t, dbURL)
	rows, err := conn.Query(context.Background(), `SELECT status, count(*) FROM all_tasks WHERE queue = $1 GROUP BY status`, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			t.Fatal(err)
		}
		out[st] = n
	}
	return out
}

// TestBulkCancelWorksInBatchesWhileOtherQueuesRun cancels many pending tasks (20,000;
// TASKFORGE_BULK_TASKS sets another number) through a replica whose bulk batches are
// watched, while a worker keeps enqueuing, polling and acking on another queue.
func TestBulkCancelWorksInBatchesWhileOtherQueuesRun(t *testing.T) {
	t.Parallel()
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("TASKFORGE_BULK_TASKS")); err == nil && v > 0 {
		n = v
	}
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("big", nil)
	s.CreateQueue("live", nil)
	if n >= 100000 { // enqueue through SQL: the point is the cancel, not the enqueue
		conn := dbConn(t, s.Config.DatabaseURL)
		if _, err := conn.Exec(context.Background(), `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries)
			SELECT gen_random_uuid(), 'big', to_jsonb(i), 5, 'pending', now(), 3 FROM generate_series(1, $1) i`, n); err != nil {
			t.Fatal(err)
		}
	} else {
		fill(t, s, "big", n, nil)
	}
	// Let the dispatcher mirror the head of the backlog into the buffer, so the
	// cancel also meets claimed (buffered) tasks.
	s.Signals.DispatchPass.WaitUntil(t, "a dispatcher pass that buffers tasks", func() bool {
		return statusCounts(t, s.Config.DatabaseURL, "big")["claimed"] > 0
	})

	const batch = 1000
	var mu sync.Mutex
	var batches []int
	api.SetBulkBatch(s.Server.API, batch, func(rows int) {
		mu.Lock()
		batches = append(batches, rows)
		mu.Unlock()
	})

	// A worker on another queue, timed throughout.
	ctx, stop := context.WithCancel(context.Background())
	type cycle struct {
		start time.Time
		took  time.Duration
	}
	var cycles []cycle
	var failures, cycled atomic.Int64
	worked := make(chan struct{})
	go func() {
		defer close(worked)
		for i := 0; ctx.Err() == nil; i++ {
			start := time.Now()
			task := s.Do("POST", "/queues/live/tasks", map[string]any{"payload": i})
			if task.Status != 201 {
				failures.Add(1)
				continue
			}
			var p []testserver.Polled
			for len(p) == 0 && ctx.Err() == nil {
				p = s.Poll("live-worker", []string{"live"}, 1, 2000)
			}
			if len(p) == 0 {
				return
			}
			if s.Ack("live-worker", p[0]).Status != 200 {
				failures.Add(1)
			}
			cycles = append(cycles, cycle{start, time.Since(start)})
			cycled.Add(1)
		}
	}()
	// A few cycles before the cancel and a few after it, for comparison.
	cyclesAfter := func(n int64, when string) {
		t.Helper()
		testserver.Eventually(t, 30*time.Second, fmt.Sprintf("%d worker cycles %s the cancel", n, when),
			func() bool { return cycled.Load() >= n })
	}
	cyclesAfter(3, "before")

	start := time.Now()
	var out struct {
		Cancelled       int `json:"cancelled"`
		CancelRequested int `json:"cancel_requested"`
	}
	s.Must(200, "POST", "/queues/big/tasks/cancel", map[string]any{"status": "pending"}).JSON(t, &out)
	took := time.Since(start)
	cyclesAfter(cycled.Load()+3, "after")
	stop()
	<-worked

	mu.Lock()
	defer mu.Unlock()
	if out.Cancelled != n || out.CancelRequested != 0 {
		t.Fatalf("cancelled %+v, want %d", out, n)
	}
	if got := statusCounts(t, s.Config.DatabaseURL, "big"); got["cancelled"] != n || len(got) != 1 {
		t.Fatalf("statuses after the bulk cancel: %v", got)
	}
	if slices.Max(batches) > batch || len(batches) < n/batch {
		t.Fatalf("%d batches, largest %d rows: want at least %d of at most %d", len(batches), slices.Max(batches), n/batch, batch)
	}
	if size := s.Redis.ZCard(context.Background(), s.Server.Buffer.Key("big")).Val(); size != 0 {
		t.Fatalf("%d cancelled tasks left in the buffer", size)
	}
	if p := s.Poll("w", []string{"big"}, 10, 0); len(p) != 0 {
		t.Fatalf("polled %d tasks after the bulk cancel", len(p))
	}
	var during, outside []time.Duration
	for _, c := range cycles {
		if c.start.After(start) && c.start.Add(c.took).Before(start.Add(took)) {
			during = append(during, c.took)
		} else {
			outside = append(outside, c.took)
		}
	}
	if failures.Load() > 0 || len(during) == 0 {
		t.Fatalf("the other queue's worker: %d failures, %d cycles during the cancel", failures.Load(), len(during))
	}
	slices.Sort(during)
	slices.Sort(outside)
	t.Logf("bulk cancel of %d pending tasks: %s in %d batches; enqueue+poll+ack cycles on another queue: %d during it, median %s, max %s; %d before and after, median %s, max %s",
		n, took, len(batches), len(during), during[len(during)/2], during[len(during)-1],
		len(outside), outside[len(outside)/2], outside[len(outside)-1])
}

func TestBulkCancelByIDsAndBadInput(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"max_retries": 0})
	later := time.Now().Add(time.Hour).Format(time.RFC3339)
	ids := fill(t, s, "q", 5, map[string]any{"scheduled_at": later})
	running := s.Enqueue("q", map[string]any{"payload": "run"})
	var p []testserver.Polled
	for len(p) == 0 {
		p = s.Poll("w", []string{"q"}, 1, 5000)
	}
	if p[0].ID != running.ID {
		t.Fatalf("polled %s", p[0].ID)
	}
	before := statusCounts(t, s.Config.DatabaseURL, "q")

	for _, body := range []any{
		"", `{}`, `{"status": "executing"}`, `{"status": "done"}`, `{"status": "nope"}`, `{"ids": []}`,
		map[string]any{"ids": ids[:1], "status": "pending"}, `{"ids": ["not-a-uuid"]}`, `{"status": "pending", "x": 1}`,
		map[string]any{"ids": make([]string, 1001)},
	} {
		resp := s.Do("POST", "/queues/q/tasks/cancel", body)
		if resp.Status != 400 || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("body %v: %d %s", body, resp.Status, resp.Body)
		}
	}
	if got := statusCounts(t, s.Config.DatabaseURL, "q"); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("bad requests changed statuses: %v, was %v", got, before)
	}
	s.Must(404, "POST", "/queues/nope/tasks/cancel", map[string]any{"status": "pending"})
	// blocked is accepted; no task has it yet.
	var out struct {
		Cancelled       int `json:"cancelled"`
		CancelRequested int `json:"cancel_requested"`
	}
	s.Must(200, "POST", "/queues/q/tasks/cancel", map[string]any{"status": "blocked"}).JSON(t, &out)
	if out.Cancelled != 0 {
		t.Fatalf("blocked cancelled %d", out.Cancelled)
	}

	// By ids: waiting ones end cancelled, the executing one is flagged, unknown and
	// repeated ids are skipped.
	req := []string{ids[0], ids[1], ids[1], running.ID, "0190a4a0-0000-7000-8000-000000000000"}
	s.Must(200, "POST", "/queues/q/tasks/cancel", map[string]any{"ids": req}).JSON(t, &out)
	if out.Cancelled != 2 || out.CancelRequested != 1 {
		t.Fatalf("cancel by ids: %+v", out)
	}
	if got := s.Task("q", running.ID); got.Status != "executing" || !got.CancelRequested {
		t.Fatalf("executing task after a bulk cancel: %s cancel_requested %v", got.Status, got.CancelRequested)
	}
	hb := s.Heartbeat("w", p[0]).Map(t)
	if hb["cancel_requested"] != true {
		t.Fatalf("the worker did not hear of the cancel: %v", hb)
	}
	s.Must(200, "POST", "/queues/q/tasks/cancel", map[string]any{"ids": ids[:2]}).JSON(t, &out)
	if out.Cancelled != 0 {
		t.Fatalf("cancelling cancelled tasks again: %+v", out)
	}
	if got := statusCounts(t, s.Config.DatabaseURL, "q"); got["pending"] != 3 || got["cancelled"] != 2 {
		t.Fatalf("statuses: %v", got)
	}

	// Audited, refused requests included.
	var audit struct {
		Entries []struct {
			Route  string `json:"route"`
			Status int    `json:"status"`
		} `json:"entries"`
	}
	s.Must(200, "GET", "/audit?queue=q&limit=500", nil).JSON(t, &audit)
	byStatus := map[int]int{}
	for _, e := range audit.Entries {
		if e.Route == "/queues/:name/tasks/cancel" {
			byStatus[e.Status]++
		}
	}
	if byStatus[200] < 3 || byStatus[400] < 10 {
		t.Fatalf("audit entries of bulk cancels by status: %v", byStatus)
	}
}

func TestBulkDiscardDead(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	a := kill(t, s, "q", "a")
	b := kill(t, s, "q", "b")
	live := s.Enqueue("q", map[string]any{"payload": "live", "scheduled_at": time.Now().Add(time.Hour).Format(time.RFC3339)})
	// More dead tasks than one batch, made directly.
	conn := dbConn(t, s.Config.DatabaseURL)
	if _, err := conn.Exec(context.Background(), `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, finished_at)
		SELECT gen_random_uuid(), 'q', to_jsonb(i), 5, 'dead', now(), 3, now() FROM generate_series(1, 2500) i`); err != nil {
		t.Fatal(err)
	}
	var batches atomic.Int64
	api.SetBulkBatch(s.Server.API, 1000, func(rows int) {
		if rows > 1000 {
			t.Errorf("a batch of %d rows", rows)
		}
		batches.Add(1)
	})
	for _, body := range []any{"", `{}`, `{"all": false}`, `{"ids": []}`, map[string]any{"ids": []string{a.ID}, "all": true}, `{"all": "yes"}`} {
		resp := s.Do("DELETE", "/queues/q/dlq", body)
		if resp.Status != 400 || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("body %v: %d %s", body, resp.Status, resp.Body)
		}
	}
	s.Must(404, "DELETE", "/queues/nope/dlq", map[string]any{"all": true})

	var out struct {
		Discarded int `json:"discarded"`
	}
	// A live task's id is not a dead task: skipped.
	s.Must(200, "DELETE", "/queues/q/dlq", map[string]any{"ids": []string{a.ID, live.ID}}).JSON(t, &out)
	if out.Discarded != 1 {
		t.Fatalf("discard by ids: %+v", out)
	}
	s.Must(404, "GET", "/queues/q/tasks/"+a.ID, nil)
	s.Must(200, "DELETE", "/queues/q/dlq", map[string]any{"all": true}).JSON(t, &out)
	if out.Discarded != 2501 || batches.Load() < 3 {
		t.Fatalf("discard all: %+v in %d batches", out, batches.Load())
	}
	s.Must(404, "GET", "/queues/q/tasks/"+b.ID, nil)
	var audit struct {
		Entries []struct {
			Route string `json:"route"`
		} `json:"entries"`
	}
	s.Must(200, "GET", "/audit?queue=q&limit=500", nil).JSON(t, &audit)
	discards := 0
	for _, e := range audit.Entries {
		if e.Route == "/queues/:name/dlq" {
			discards++
		}
	}
	if discards < 8 {
		t.Fatalf("%d audit entries of bulk discards, want 8", discards)
	}
	if got := statusCounts(t, s.Config.DatabaseURL, "q"); got["pending"] != 1 || len(got) != 1 {
		t.Fatalf("statuses after discarding all: %v", got)
	}
	var attempts int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM all_attempts WHERE task_id = $1`, b.ID).Scan(&attempts); err != nil || attempts != 0 {
		t.Fatalf("attempts of a discarded task: %d (%v)", attempts, err)
	}
	var stats struct {
		DLQDepth int `json:"dlq_depth"`
	}
	s.Must(200, "GET", "/queues/q/stats", nil).JSON(t, &stats)
	if stats.DLQDepth != 0 {
		t.Fatalf("dlq_depth %d after discarding all", stats.DLQDepth)
	}
}
