package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskforge/taskforge/api"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

func shortLeases(c *server.Config) {
	c.LeaseTimeout = 600 * time.Millisecond
	c.HeartbeatInterval = 200 * time.Millisecond
	c.WatchdogInterval = 100 * time.Millisecond
}

func TestPollDeliversByPriorityThenFIFO(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"paused": false})
	// Enqueue as a batch so all are buffered together; priorities interleaved.
	prios := []int{5, 1, 10, 1, 5, 3, 10, 3, 1, 5}
	tasks := make([]map[string]any, len(prios))
	for i, p := range prios {
		tasks[i] = map[string]any{"payload": i, "priority": p}
	}
	var out struct {
		Tasks []testserver.Task `json:"tasks"`
	}
	s.Must(201, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": tasks}).JSON(t, &out)
	s.Signals.DispatchPass.WaitUntil(t, "a dispatcher pass that buffers the tasks", func() bool {
		return s.Task("q", out.Tasks[len(out.Tasks)-1].ID).Status == "claimed"
	})
	var got []testserver.Polled
	for len(got) < len(prios) {
		p := s.Poll("w", []string{"q"}, 3, 1000)
		if len(p) == 0 {
			t.Fatalf("poll came back empty after %d tasks", len(got))
		}
		got = append(got, p...)
	}
	// Expected: priority ascending; within a priority, enqueue order (batch order
	// shares one created time, so FIFO is by eligible time then the batch position).
	want := []int{1, 3, 8, 5, 7, 0, 4, 9, 2, 6}
	for i, p := range got {
		var idx int
		if err := json.Unmarshal(p.Payload, &idx); err != nil {
			t.Fatal(err)
		}
		if idx != want[i] {
			t.Fatalf("delivery %d: payload %d (priority %d), want payload %d (priority %d); order %v, want %v",
				i, idx, prios[idx], want[i], prios[want[i]], payloads(got), want)
		}
	}
}

func payloads(ps []testserver.Polled) []string {
	var out []string
	for _, p := range ps {
		out = append(out, string(p.Payload))
	}
	return out
}

func TestFIFOWithinPriority(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	// FIFO is by eligible time: each task is eligible a millisecond after the one
	// enqueued before it, all of them already due.
	base := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	var ids []string
	for i := 0; i < 6; i++ {
		at := base.Add(time.Duration(i) * time.Millisecond).UTC().Format(time.RFC3339Nano)
		ids = append(ids, s.Enqueue("q", map[string]any{"payload": i, "priority": 4, "scheduled_at": at}).ID)
	}
	s.Signals.DispatchPass.WaitUntil(t, "a dispatcher pass that buffers all six", func() bool {
		for _, id := range ids {
			if s.Task("q", id).Status != "claimed" {
				return false
			}
		}
		return true
	})
	for i, id := range ids {
		p := s.Poll("w", []string{"q"}, 1, 1000)
		if len(p) != 1 || p[0].ID != id {
			t.Fatalf("delivery %d: got %+v, want task %s", i, p, id)
		}
	}
}

func TestDelayedTaskNotDeliveredEarly(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	at := time.Now().Add(1500 * time.Millisecond)
	task := s.Enqueue("q", map[string]any{"payload": "later", "scheduled_at": at.UTC().Format(time.RFC3339Nano)})
	if p := s.Poll("w", []string{"q"}, 1, 700); len(p) != 0 {
		t.Fatalf("delivered %v before its schedule", p)
	}
	var p []testserver.Polled
	for len(p) == 0 {
		p = s.Poll("w", []string{"q"}, 1, 3000)
	}
	if p[0].ID != task.ID {
		t.Fatalf("got %s", p[0].ID)
	}
	got := s.Task("q", task.ID)
	if got.AttemptHistory[0].StartedAt.Before(at) {
		t.Fatalf("attempt started %s, before the schedule %s", got.AttemptHistory[0].StartedAt, at)
	}
}

func TestPollTriesQueuesInOrderAndHonoursMaxTasks(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("a", nil)
	s.CreateQueue("b", nil)
	for i := 0; i < 3; i++ {
		s.Enqueue("a", map[string]any{"payload": i})
		s.Enqueue("b", map[string]any{"payload": i})
	}
	s.Signals.DispatchPass.WaitUntil(t, "a dispatcher pass that buffers the tasks", func() bool {
		return s.Redis.ZCard(t.Context(), s.Server.Buffer.Key("a")).Val() == 3 && s.Redis.ZCard(t.Context(), s.Server.Buffer.Key("b")).Val() == 3
	})
	p := s.Poll("w", []string{"b", "a", "missing"}, 4, 0)
	if len(p) != 4 || p[0].Queue != "b" || p[2].Queue != "b" || p[3].Queue != "a" {
		t.Fatalf("poll order: %+v", p)
	}
	for _, task := range p {
		if task.Attempt != 1 || task.LeaseToken == "" || task.HeartbeatIntervalMs != 1000 || time.Until(task.LeaseExpiresAt) < 3*time.Second {
			t.Fatalf("polled task fields: %+v", task)
		}
	}
	bad := []map[string]any{
		{"queues": []string{"a"}},
		{"worker_id": "w"},
		{"worker_id": "w", "queues": []string{}},
		{"worker_id": "w", "queues": []string{"a"}, "max_tasks": 0},
		{"worker_id": "w", "queues": []string{"a"}, "max_tasks": 101},
		{"worker_id": "w", "queues": []string{"a"}, "wait_ms": 30001},
		{"worker_id": "w", "queues": []string{"a"}, "wait_ms": -1},
		{"worker_id": "w", "queues": []string{"a/b"}},
		{"worker_id": "w", "queues": []string{"a"}, "extra": 1},
	}
	for _, b := range bad {
		if resp := s.Do("POST", "/workers/poll", b); resp.Status != 400 || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("poll %v: %d %s", b, resp.Status, resp.Body)
		}
	}
	if n := s.Redis.ZCard(t.Context(), s.Server.Buffer.Key("a")).Val(); n != 2 {
		t.Fatalf("bad polls took tasks: buffer a holds %d, want 2", n)
	}
}

// TestPrefetchPollSkipsCappedQueues: a poll marked prefetch (for tasks a worker
// holds until a slot frees) takes nothing from a queue with a concurrency cap,
// where a waiting task would hold one of the cap's slots without running; an
// ordinary poll still does.
func TestPrefetchPollSkipsCappedQueues(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("capped", map[string]any{"max_concurrency": 2})
	s.CreateQueue("open", nil)
	for i := 0; i < 2; i++ {
		s.Enqueue("capped", map[string]any{"payload": i})
		s.Enqueue("open", map[string]any{"payload": i})
	}
	s.Signals.DispatchPass.WaitUntil(t, "a dispatcher pass that buffers the tasks", func() bool {
		return s.Redis.ZCard(t.Context(), s.Server.Buffer.Key("capped")).Val() == 2 &&
			s.Redis.ZCard(t.Context(), s.Server.Buffer.Key("open")).Val() == 2
	})
	var got struct{ Tasks []testserver.Polled }
	s.Must(200, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"capped", "open"},
		"max_tasks": 4, "prefetch": true}).JSON(t, &got)
	if len(got.Tasks) != 2 || got.Tasks[0].Queue != "open" || got.Tasks[1].Queue != "open" {
		t.Fatalf("prefetch poll took %+v, want the two tasks of the uncapped queue", got.Tasks)
	}
	if n := s.Redis.ZCard(t.Context(), s.Server.Buffer.Key("capped")).Val(); n != 2 {
		t.Fatalf("the prefetch poll popped from the capped queue: %d left buffered, want 2", n)
	}
	s.Must(200, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"capped"},
		"max_tasks": 4, "wait_ms": 1000, "prefetch": true}).JSON(t, &got)
	if len(got.Tasks) != 0 {
		t.Fatalf("a prefetch long-poll on the capped queue alone took %+v", got.Tasks)
	}
	if p := s.Poll("w", []string{"capped"}, 4, 0); len(p) != 2 {
		t.Fatalf("an ordinary poll of the capped queue took %d tasks, want 2", len(p))
	}
	if resp := s.Do("POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"open"}, "prefetch": "yes"}); resp.Status != 400 {
		t.Fatalf("prefetch \"yes\": %d %s", resp.Status, resp.Body)
	}
}

// TestPollPrefetchTasks: a poll whose prefetch_tasks of max_tasks are prefetch
// fills its free part (the first max_tasks-prefetch_tasks tasks) from every queue
// and its prefetch part only from queues without a cap, so a capped queue never
// gives more than the free part, and nothing once earlier queues filled it; bad
// values are refused and take nothing.
func TestPollPrefetchTasks(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("capped", map[string]any{"max_concurrency": 5})
	s.CreateQueue("open", nil)
	for i := 0; i < 3; i++ {
		s.Enqueue("capped", map[string]any{"payload": i})
	}
	for i := 0; i < 6; i++ {
		s.Enqueue("open", map[string]any{"payload": i})
	}
	buffered := func(q string) int64 { return s.Redis.ZCard(t.Context(), s.Server.Buffer.Key(q)).Val() }
	s.Signals.DispatchPass.WaitUntil(t, "a dispatcher pass that buffers the tasks", func() bool {
		return buffered("capped") == 3 && buffered("open") == 6
	})

	bad := []map[string]any{
		{"max_tasks": 4, "prefetch_tasks": -1},
		{"max_tasks": 4, "prefetch_tasks": 5},
		{"prefetch_tasks": 2}, // max_tasks defaults to 1
		{"max_tasks": 4, "prefetch_tasks": 1.5},
		{"max_tasks": 4, "prefetch_tasks": "2"},
		{"max_tasks": 4, "prefetch_tasks": 2, "prefetch": true},
	}
	for _, b := range bad {
		b["worker_id"], b["queues"] = "w", []string{"capped", "open"}
		if resp := s.Do("POST", "/workers/poll", b); resp.Status != 400 || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("poll %v: %d %s", b, resp.Status, resp.Body)
		}
	}
	if buffered("capped") != 3 || buffered("open") != 6 {
		t.Fatalf("bad polls took tasks: capped %d, open %d buffered", buffered("capped"), buffered("open"))
	}

	var got struct{ Tasks []testserver.Polled }
	s.Must(200, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"capped", "open"},
		"max_tasks": 6, "prefetch_tasks": 4}).JSON(t, &got)
	queues := func() (out []string) {
		for _, p := range got.Tasks {
			out = append(out, p.Queue)
		}
		return out
	}
	if want := []string{"capped", "capped", "open", "open", "open", "open"}; !slices.Equal(queues(), want) {
		t.Fatalf("poll of 6 with 4 prefetch took %v, want %v", queues(), want)
	}
	// The uncapped queue first: its tasks fill the two free places, and the
	// capped queue, which may only fill free places, gives nothing.
	s.Must(200, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"open", "capped"},
		"max_tasks": 4, "prefetch_tasks": 2}).JSON(t, &got)
	if want := []string{"open", "open"}; !slices.Equal(queues(), want) {
		t.Fatalf("poll of open then capped took %v, want %v", queues(), want)
	}
	if n := buffered("capped"); n != 1 {
		t.Fatalf("the capped queue gave a prefetch: %d left buffered, want 1", n)
	}
	// "prefetch": true is prefetch_tasks = max_tasks, and both may be given.
	s.Must(200, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"capped"},
		"max_tasks": 2, "prefetch_tasks": 2, "prefetch": true}).JSON(t, &got)
	if len(got.Tasks) != 0 {
		t.Fatalf("an all-prefetch poll of the capped queue took %v", queues())
	}
	s.Must(200, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"capped"},
		"max_tasks": 2, "prefetch_tasks": 0}).JSON(t, &got)
	if want := []string{"capped"}; !slices.Equal(queues(), want) {
		t.Fatalf("poll with prefetch_tasks 0 took %v, want %v", queues(), want)
	}
}

// TestPollPrefetchTasksGroupCap: a fair queue with a group cap is capped too: a
// poll's prefetch part takes nothing from it, its free part does.
func TestPollPrefetchTasksGroupCap(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("fair", map[string]any{"fairness": "round_robin", "group_max_concurrency": 2})
	s.CreateQueue("open", nil)
	for _, g := range []string{"a", "b"} {
		for i := 0; i < 2; i++ {
			s.Enqueue("fair", map[string]any{"payload": i, "group": g})
		}
	}
	for i := 0; i < 4; i++ {
		s.Enqueue("open", map[string]any{"payload": i})
	}
	buffered := func(q string) int64 { return s.Redis.ZCard(t.Context(), s.Server.Buffer.Key(q)).Val() }
	s.Signals.DispatchPass.WaitUntil(t, "a dispatcher pass that buffers the tasks", func() bool {
		ids, _, err := s.Server.Buffer.FairSize(t.Context(), "fair")
		return err == nil && ids >= 2 && buffered("open") == 4
	})
	var got struct{ Tasks []testserver.Polled }
	s.Must(200, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"fair", "open"},
		"max_tasks": 5, "prefetch_tasks": 4}).JSON(t, &got)
	var queues []string
	for _, p := range got.Tasks {
		queues = append(queues, p.Queue)
	}
	if want := []string{"fair", "open", "open", "open", "open"}; !slices.Equal(queues, want) {
		t.Fatalf("poll of 5 with 4 prefetch took %v, want %v", queues, want)
	}
}

// TestPollCarriesAcks: acks sent with a poll are committed with its claim (alone
// when it finds no work), each on its own (a stale token gets lease_lost), in the
// order sent; such a poll does not wait for work; a malformed ack fails the whole
// poll and changes nothing.
func TestPollCarriesAcks(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	enqueueBuffered(t, s, "q", nil, 3)
	held := s.Poll("w", []string{"q"}, 2, 5000)
	if len(held) != 2 {
		t.Fatalf("polled %d tasks, want 2", len(held))
	}
	ack := func(p testserver.Polled, token string) map[string]any {
		return map[string]any{"task_id": p.ID, "lease_token": token, "result": map[string]any{"n": p.ID}}
	}
	stale := "00000000-0000-4000-8000-000000000000"
	for _, bad := range []map[string]any{
		{"worker_id": "w", "queues": []string{"q"}, "acks": []map[string]any{ack(held[0], held[0].LeaseToken), {"task_id": held[1].ID}}},
		{"worker_id": "w", "queues": []string{"q"}, "acks": []map[string]any{{"task_id": held[0].ID, "lease_token": held[0].LeaseToken, "extra": 1}}},
		{"worker_id": "w", "queues": []string{"q"}, "acks": "all"},
	} {
		if resp := s.Do("POST", "/workers/poll", bad); resp.Status != 400 {
			t.Fatalf("poll with bad acks %v: %d %s", bad["acks"], resp.Status, resp.Body)
		}
	}
	if got := s.Task("q", held[0].ID); got.Status != "executing" {
		t.Fatalf("a refused poll acked its task: %s", got.Status)
	}

	type pollAnswer struct {
		Tasks []testserver.Polled
		Acks  []struct {
			TaskID string `json:"task_id"`
			Error  *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
	}
	var out pollAnswer
	s.Must(200, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"q"}, "max_tasks": 5, "wait_ms": 20000,
		"acks": []map[string]any{ack(held[1], stale), ack(held[0], held[0].LeaseToken)}}).JSON(t, &out)
	if len(out.Acks) != 2 || out.Acks[0].TaskID != held[1].ID || out.Acks[0].Error == nil || out.Acks[0].Error.Code != "lease_lost" ||
		out.Acks[1].TaskID != held[0].ID || out.Acks[1].Error != nil {
		t.Fatalf("ack results %+v", out.Acks)
	}
	if len(out.Tasks) != 1 {
		t.Fatalf("the poll claimed %d tasks, want the 1 left", len(out.Tasks))
	}
	if got := s.Task("q", held[0].ID); got.Status != "done" || string(got.Result) != `{"n":"`+held[0].ID+`"}` {
		t.Fatalf("acked task: %s, result %s", got.Status, got.Result)
	}
	if got := s.Task("q", held[1].ID); got.Status != "executing" {
		t.Fatalf("the stale ack changed its task: %s", got.Status)
	}
	// Nothing left to claim: a poll with acks answers at once all the same.
	start := time.Now()
	out = pollAnswer{}
	s.Must(200, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"q"}, "wait_ms": 20000,
		"acks": []map[string]any{ack(held[1], held[1].LeaseToken)}}).JSON(t, &out)
	if len(out.Tasks) != 0 || len(out.Acks) != 1 || out.Acks[0].Error != nil || time.Since(start) > 10*time.Second {
		t.Fatalf("poll with an ack and no work: %d tasks, acks %+v, after %s", len(out.Tasks), out.Acks, time.Since(start))
	}
}

func TestLongPollWakesWhenWorkArrives(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) {
		c.DispatchInterval = time.Hour // only NOTIFY and the wake-up can deliver in time
	}})
	s.CreateQueue("q", nil)
	got := make(chan []testserver.Polled, 1)
	go func() { got <- s.Poll("w", []string{"q"}, 1, 20000) }()
	testserver.Eventually(t, 5*time.Second, "poller parked", func() bool {
		return s.Redis.PubSubNumSub(t.Context(), s.Server.Buffer.WakeChannel()).Val()[s.Server.Buffer.WakeChannel()] > 0 &&
			api.Parked(s.Server.API, "q") == 1
	})
	start := time.Now()
	task := s.Enqueue("q", map[string]any{"payload": "wake"})
	select {
	case p := <-got:
		if len(p) != 1 || p[0].ID != task.ID {
			t.Fatalf("long poll returned %+v", p)
		}
		t.Logf("enqueue → long-poll return: %s", time.Since(start))
	case <-time.After(15 * time.Second):
		t.Fatal("long poll was not woken by the enqueue")
	}
}

func TestAckNackHeartbeat(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"max_retries": 2, "backoff_base_ms": 400, "backoff_max_ms": 100000})
	task := s.Enqueue("q", map[string]any{"payload": "x"})
	p := s.Poll("w1", []string{"q"}, 1, 5000)[0]

	hb := s.Heartbeat("w1", p)
	if hb.Status != 200 {
		t.Fatalf("heartbeat: %d %s", hb.Status, hb.Body)
	}
	var lease struct {
		LeaseExpiresAt  time.Time `json:"lease_expires_at"`
		CancelRequested bool      `json:"cancel_requested"`
	}
	hb.JSON(t, &lease)
	if !lease.LeaseExpiresAt.After(p.LeaseExpiresAt) || lease.CancelRequested {
		t.Fatalf("heartbeat did not extend the lease: %v → %v", p.LeaseExpiresAt, lease.LeaseExpiresAt)
	}

	// Nack (retryable) → retry after the backoff of attempt 1: [base, 2*base].
	var nacked testserver.Task
	s.Must(200, "POST", "/workers/nack", map[string]any{"worker_id": "w1", "task_id": p.ID, "lease_token": p.LeaseToken, "error": "flaky"}).JSON(t, &nacked)
	delay := nacked.ScheduledAt.Sub(nacked.UpdatedAt)
	if nacked.Status != "retry" || delay < 400*time.Millisecond || delay > 800*time.Millisecond || *nacked.LastError != "flaky" {
		t.Fatalf("nack: status %s delay %s", nacked.Status, delay)
	}
	// The same token again: 409, nothing changes.
	before := s.Task("q", task.ID)
	for name, resp := range map[string]testserver.Response{
		"ack": s.Ack("w1", p), "nack": s.Nack("w1", p, "again", nil), "heartbeat": s.Heartbeat("w1", p),
	} {
		if resp.Status != 409 || resp.ErrorCode(t) != "lease_lost" {
			t.Fatalf("stale %s: %d %s", name, resp.Status, resp.Body)
		}
	}
	// The retry may fall due during the stale calls on a loaded machine (its backoff is
	// 400-800 ms) and the dispatcher then moves it to claimed: that change is the
	// dispatcher's. A stale call's would show as done, another error or attempt, or an
	// update of a task still waiting its backoff.
	after := s.Task("q", task.ID)
	dispatched := after.Status == "claimed" && !time.Now().Before(before.ScheduledAt)
	if after.Attempts != before.Attempts || after.LastError == nil || *after.LastError != "flaky" ||
		!dispatched && (after.UpdatedAt != before.UpdatedAt || after.Status != before.Status) {
		t.Fatalf("stale calls changed the task: before %s attempts %d updated %s, after %s attempts %d updated %s",
			before.Status, before.Attempts, before.UpdatedAt, after.Status, after.Attempts, after.UpdatedAt)
	}

	// Attempt 2, then ack with a result.
	p2 := s.Poll("w2", []string{"q"}, 1, 5000)[0]
	if p2.Attempt != 2 || p2.LeaseToken == p.LeaseToken {
		t.Fatalf("second attempt: %+v", p2)
	}
	if resp := s.Nack("w2", p, "old token", nil); resp.Status != 409 {
		t.Fatalf("first attempt's token on the second attempt: %d", resp.Status)
	}
	if resp := s.Ack("w1", testserver.Polled{ID: p2.ID, LeaseToken: p2.LeaseToken}); resp.Status != 409 {
		t.Fatalf("another worker's ack with the right token: %d", resp.Status)
	}
	var done testserver.Task
	s.Must(200, "POST", "/workers/ack", map[string]any{"worker_id": "w2", "task_id": p2.ID, "lease_token": p2.LeaseToken,
		"result": map[string]any{"sent": true}}).JSON(t, &done)
	if done.Status != "done" || string(done.Result) != `{"sent":true}` || done.FinishedAt == nil {
		t.Fatalf("ack: %+v", done)
	}
	h := s.Task("q", task.ID).AttemptHistory
	if len(h) != 2 || h[0].Status != "failed" || *h[0].Error != "flaky" || h[0].WorkerID != "w1" ||
		h[1].Status != "succeeded" || h[1].WorkerID != "w2" || h[1].FinishedAt == nil {
		t.Fatalf("history: %+v", h)
	}
	// A done task never runs again.
	if p := s.Poll("w3", []string{"q"}, 1, 300); len(p) != 0 {
		t.Fatalf("done task delivered again: %+v", p)
	}

	bad := []map[string]any{
		{"task_id": p2.ID, "lease_token": p2.LeaseToken},
		{"worker_id": "w2", "task_id": p2.ID},
		{"worker_id": "w2", "task_id": "nope", "lease_token": p2.LeaseToken},
		{"worker_id": "w2", "task_id": p2.ID, "lease_token": p2.LeaseToken, "retry_after_ms": -5},
		{"worker_id": "w2", "task_id": p2.ID, "lease_token": p2.LeaseToken, "retryable": "yes"},
	}
	for _, b := range bad {
		if resp := s.Do("POST", "/workers/nack", b); resp.Status != 400 {
			t.Errorf("nack %v: %d %s", b, resp.Status, resp.Body)
		}
	}
	if resp := s.Do("POST", "/workers/heartbeat", map[string]any{"worker_id": "idle"}); resp.Status != 200 {
		t.Fatalf("worker-only heartbeat: %d %s", resp.Status, resp.Body)
	}
}

func TestNackPermanentAndRetryAfterAndBudget(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"max_retries": 1, "backoff_base_ms": 60000, "backoff_max_ms": 60000})

	perm := s.Enqueue("q", map[string]any{"payload": "perm"})
	p := s.Poll("w", []string{"q"}, 1, 5000)[0]
	var got testserver.Task
	s.Nack("w", p, "bad input", map[string]any{"retryable": false}).JSON(t, &got)
	if got.ID != perm.ID || got.Status != "dead" || got.FinishedAt == nil {
		t.Fatalf("permanent nack: %+v", got)
	}

	// retry_after_ms overrides the queue's (one-minute) backoff; then the budget of one
	// retry is spent and the second failure dead-letters.
	budget := s.Enqueue("q", map[string]any{"payload": "budget"})
	p = s.Poll("w", []string{"q"}, 1, 5000)[0]
	s.Nack("w", p, "try soon", map[string]any{"retry_after_ms": 0}).JSON(t, &got)
	if got.Status != "retry" || got.ScheduledAt.After(got.UpdatedAt) {
		t.Fatalf("retry_after_ms 0: %+v", got)
	}
	p = s.Poll("w", []string{"q"}, 1, 5000)[0]
	if p.ID != budget.ID || p.Attempt != 2 {
		t.Fatalf("retry: %+v", p)
	}
	s.Nack("w", p, "still failing", nil).JSON(t, &got)
	if got.Status != "dead" || got.Attempts != 2 {
		t.Fatalf("budget spent: %+v", got)
	}
}

// TestReleaseKeepsBudgetAndPlace: a released attempt is recorded as released, the
// task goes back in line ahead of younger tasks of its priority, the release does
// not spend the retry budget (a queue with max_retries 0 still runs the task again),
// and a failure after it does. Stale tokens and bad input change nothing; a release
// of a task with a cancel requested cancels it.
func TestReleaseKeepsBudgetAndPlace(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"max_retries": 0})
	first := s.Enqueue("q", map[string]any{"payload": "first"})
	p := s.Poll("w1", []string{"q"}, 1, 5000)[0]
	second := s.Enqueue("q", map[string]any{"payload": "second"})

	var got testserver.Task
	s.Must(200, "POST", "/workers/release", map[string]any{"worker_id": "w1", "task_id": p.ID,
		"lease_token": p.LeaseToken, "reason": "worker w1 shut down"}).JSON(t, &got)
	if got.ID != first.ID || got.Status != "pending" || got.Releases != 1 || got.Attempts != 1 ||
		!got.ScheduledAt.Equal(first.ScheduledAt) || got.FinishedAt != nil || got.LeaseExpiresAt != nil ||
		got.LastError == nil || *got.LastError != "worker w1 shut down" {
		t.Fatalf("released task: %+v", got)
	}
	// The same token again, and bad input: 409 and 400, and nothing changes (the
	// dispatcher may move the task to claimed meanwhile; no attempt or release may
	// be added).
	for _, tc := range []struct {
		body map[string]any
		want int
	}{
		{map[string]any{"worker_id": "w1", "task_id": p.ID, "lease_token": p.LeaseToken}, 409},
		{map[string]any{"worker_id": "w1", "task_id": p.ID}, 400},
		{map[string]any{"task_id": p.ID, "lease_token": p.LeaseToken}, 400},
		{map[string]any{"worker_id": "w1", "task_id": p.ID, "lease_token": p.LeaseToken, "reason": 7}, 400},
		{map[string]any{"worker_id": "w1", "task_id": p.ID, "lease_token": p.LeaseToken, "reason": strings.Repeat("x", 64<<10+1)}, 400},
	} {
		if resp := s.Do("POST", "/workers/release", tc.body); resp.Status != tc.want {
			t.Errorf("release %.80v: %d %s, want %d", tc.body, resp.Status, resp.Body, tc.want)
		}
	}
	if after := s.Task("q", first.ID); after.Attempts != 1 || after.Releases != 1 || len(after.AttemptHistory) != 1 ||
		after.AttemptHistory[0].Status != "released" {
		t.Fatalf("refused releases changed the task: %+v", after)
	}

	// Back in line ahead of the younger task: attempt 2 of a task allowed one run.
	// The younger one is buffered already; wait until the dispatcher has buffered
	// the released one again too, so the poll chooses between both by their place.
	s.Signals.DispatchPass.WaitUntil(t, "the dispatcher's pass that buffers the released task again", func() bool {
		return s.Task("q", first.ID).Status == "claimed"
	})
	p2 := s.Poll("w2", []string{"q"}, 1, 5000)[0]
	if p2.ID != first.ID || p2.Attempt != 2 || p2.LeaseToken == p.LeaseToken {
		t.Fatalf("after the release the poll got %+v, want attempt 2 of %s (before %s)", p2, first.ID, second.ID)
	}
	// A failure spends the budget of none: dead.
	s.Nack("w2", p2, "broken", nil).JSON(t, &got)
	if got.Status != "dead" || got.Attempts != 2 || got.Releases != 1 {
		t.Fatalf("failure after a release: %+v", got)
	}
	h := s.Task("q", first.ID).AttemptHistory
	if len(h) != 2 || h[0].Status != "released" || h[0].WorkerID != "w1" || *h[0].Error != "worker w1 shut down" ||
		h[0].FinishedAt == nil || h[1].Status != "failed" {
		t.Fatalf("history: %+v", h)
	}

	// A release of a task whose cancel was requested ends it cancelled.
	p3 := s.Poll("w3", []string{"q"}, 1, 5000)[0]
	if p3.ID != second.ID {
		t.Fatalf("poll got %s, want %s", p3.ID, second.ID)
	}
	s.Must(202, "DELETE", "/queues/q/tasks/"+second.ID, nil) // executing: cancel requested
	s.Release("w3", p3, "shutting down").JSON(t, &got)
	if got.Status != "cancelled" || got.Releases != 0 || got.FinishedAt == nil {
		t.Fatalf("release of a cancel-requested task: %+v", got)
	}
	if h := s.Task("q", second.ID).AttemptHistory; len(h) != 1 || h[0].Status != "cancelled" {
		t.Fatalf("history: %+v", h)
	}
	// Of the three finished attempts (released, failed, cancelled), only the
	// failure counts, and it is the only attempt the error rate weighs.
	var stats struct {
		ErrorRate float64 `json:"error_rate"`
	}
	s.Must(200, "GET", "/queues/q/stats", nil).JSON(t, &stats)
	if stats.ErrorRate != 1 {
		t.Fatalf("error rate %v, want 1 (released and cancelled attempts left out)", stats.ErrorRate)
	}
}

func TestBackoffStaysWithinTheFormula(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	const base, maxMs = 100, 1000
	s.CreateQueue("q", map[string]any{"max_retries": 10, "backoff_base_ms": base, "backoff_max_ms": maxMs})
	task := s.Enqueue("q", map[string]any{"payload": 1})
	for n := 1; n <= 6; n++ {
		var p []testserver.Polled
		for len(p) == 0 {
			p = s.Poll("w", []string{"q"}, 1, 3000)
		}
		if p[0].ID != task.ID || p[0].Attempt != n {
			t.Fatalf("attempt %d: %+v", n, p[0])
		}
		var got testserver.Task
		s.Nack("w", p[0], "fail", nil).JSON(t, &got)
		delay := got.ScheduledAt.Sub(got.UpdatedAt).Milliseconds()
		low := min(base<<(n-1), maxMs)
		high := min(base<<(n-1)+base, maxMs)
		if delay < int64(low) || delay > int64(high) {
			t.Fatalf("attempt %d: delay %d ms outside [%d, %d]", n, delay, low, high)
		}
	}
}

func TestLeaseExpiryRedeliversAndStaleTokenChangesNothing(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: shortLeases})
	s.CreateQueue("q", map[string]any{"max_retries": 5, "backoff_base_ms": 0, "backoff_max_ms": 0})
	task := s.Enqueue("q", map[string]any{"payload": 1})
	first := s.Poll("crashed", []string{"q"}, 1, 5000)[0]

	var second []testserver.Polled
	for len(second) == 0 {
		second = s.Poll("healthy", []string{"q"}, 1, 5000)
	}
	if second[0].ID != task.ID || second[0].Attempt != 2 || second[0].LeaseToken == first.LeaseToken {
		t.Fatalf("re-delivery: %+v", second[0])
	}
	before := s.Task("q", task.ID)
	for name, resp := range map[string]testserver.Response{
		"ack": s.Ack("crashed", first), "nack": s.Nack("crashed", first, "late", nil), "heartbeat": s.Heartbeat("crashed", first),
	} {
		if resp.Status != 409 || resp.ErrorCode(t) != "lease_lost" {
			t.Fatalf("old token %s: %d %s", name, resp.Status, resp.Body)
		}
	}
	after := s.Task("q", task.ID)
	if after.UpdatedAt != before.UpdatedAt || after.Status != "executing" || *after.ClaimedBy != "healthy" {
		t.Fatalf("old token changed the task: %+v", after)
	}
	h := after.AttemptHistory
	if len(h) != 2 || h[0].Status != "abandoned" || h[0].WorkerID != "crashed" || h[0].FinishedAt == nil || h[0].Error == nil ||
		h[1].Status != "executing" {
		t.Fatalf("history: %+v", h)
	}
	s.Must(200, "POST", "/workers/ack", map[string]any{"worker_id": "healthy", "task_id": second[0].ID, "lease_token": second[0].LeaseToken})
}

func TestLeaseExpiriesSpendTheBudget(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: shortLeases})
	s.CreateQueue("q", map[string]any{"max_retries": 2, "backoff_base_ms": 0, "backoff_max_ms": 0})
	task := s.Enqueue("q", map[string]any{"payload": "poison"})
	for attempt := 1; attempt <= 3; attempt++ {
		var p []testserver.Polled
		for len(p) == 0 {
			p = s.Poll("doomed", []string{"q"}, 1, 5000)
		}
		if p[0].Attempt != attempt {
			t.Fatalf("delivery %d has attempt %d", attempt, p[0].Attempt)
		}
		// never ack: the worker "dies" holding it
	}
	s.Signals.WatchdogSweep.WaitUntil(t, "the watchdog's sweep that dead-letters the task", func() bool { return s.Task("q", task.ID).Status == "dead" })
	got := s.Task("q", task.ID)
	if got.Attempts != 3 || len(got.AttemptHistory) != 3 {
		t.Fatalf("attempts %d, history %d; want 3 each", got.Attempts, len(got.AttemptHistory))
	}
	for _, a := range got.AttemptHistory {
		if a.Status != "abandoned" {
			t.Fatalf("history: %+v", got.AttemptHistory)
		}
	}
}

func TestTimeoutEndsAttemptAsTimedOut(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) {
		c.LeaseTimeout = 10 * time.Second
		c.WatchdogInterval = 100 * time.Millisecond
	}})
	s.CreateQueue("q", map[string]any{"max_retries": 0})
	task := s.Enqueue("q", map[string]any{"payload": 1, "timeout_seconds": 1})
	p := s.Poll("w", []string{"q"}, 1, 5000)[0]
	if time.Until(p.LeaseExpiresAt) > 1100*time.Millisecond {
		t.Fatalf("lease %s outlives the 1 s timeout", time.Until(p.LeaseExpiresAt))
	}
	// Heartbeats do not extend the attempt past its timeout (a lease is 10 s, the
	// timeout 1 s: any heartbeat would pass it).
	for i := 0; i < 3; i++ {
		if resp := s.Heartbeat("w", p); resp.Status == 200 {
			var l struct {
				LeaseExpiresAt time.Time `json:"lease_expires_at"`
			}
			resp.JSON(t, &l)
			if l.LeaseExpiresAt.After(p.LeaseExpiresAt) {
				t.Fatalf("heartbeat extended past the deadline: %s > %s", l.LeaseExpiresAt, p.LeaseExpiresAt)
			}
		}
	}
	// The watchdog plans a sweep for the attempt's deadline, a second away.
	s.Signals.WatchdogSweep.WaitUntil(t, "the watchdog's sweep that times the attempt out", func() bool {
		return s.Task("q", task.ID).Status == "dead"
	})
	if h := s.Task("q", task.ID).AttemptHistory; len(h) != 1 || h[0].Status != "timed_out" {
		t.Fatalf("history: %+v", h)
	}
	if resp := s.Ack("w", p); resp.Status != 409 {
		t.Fatalf("ack after timeout: %d", resp.Status)
	}
}

func TestWorkersList(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	task := s.Enqueue("q", map[string]any{"payload": 1})
	s.Poll("busy", []string{"q"}, 1, 5000)
	s.Must(200, "POST", "/workers/heartbeat", map[string]any{"worker_id": "idle"})
	var out struct {
		Workers []struct {
			ID              string    `json:"id"`
			Queues          []string  `json:"queues"`
			LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
			CurrentTasks    []string  `json:"current_tasks"`
			Stale           bool      `json:"stale"`
		} `json:"workers"`
	}
	s.Must(http.StatusOK, "GET", "/workers", nil).JSON(t, &out)
	if len(out.Workers) != 2 || out.Workers[0].ID != "busy" || len(out.Workers[0].CurrentTasks) != 1 ||
		out.Workers[0].CurrentTasks[0] != task.ID || out.Workers[0].Queues[0] != "q" || out.Workers[0].Stale ||
		out.Workers[1].ID != "idle" || len(out.Workers[1].CurrentTasks) != 0 {
		t.Fatalf("workers: %+v", out.Workers)
	}
}

func TestBatchAckAndGroupCommit(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	tasks := make([]map[string]any, 60)
	for i := range tasks {
		tasks[i] = map[string]any{"payload": i}
	}
	s.Must(201, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": tasks})
	var got []testserver.Polled
	for len(got) < 60 {
		got = append(got, s.Poll("w", []string{"q"}, 30, 2000)...)
	}

	// A batch of 10 with one stale token and one foreign task: those two fail alone.
	batch := []map[string]any{}
	for _, p := range got[:10] {
		batch = append(batch, map[string]any{"task_id": p.ID, "lease_token": p.LeaseToken, "result": map[string]any{"ok": p.ID}})
	}
	batch[3]["lease_token"] = "00000000-0000-4000-8000-000000000000"
	batch = append(batch, map[string]any{"task_id": "0190a4a0-0000-7000-8000-000000000000", "lease_token": got[0].LeaseToken})
	var out struct {
		Results []struct {
			TaskID string           `json:"task_id"`
			Task   *testserver.Task `json:"task"`
			Error  *struct {
				Code string `json:"code"`
			} `json:"error"`
		} `json:"results"`
	}
	s.Must(200, "POST", "/workers/ack/batch", map[string]any{"worker_id": "w", "acks": batch}).JSON(t, &out)
	if len(out.Results) != 11 {
		t.Fatalf("%d results for 11 acks", len(out.Results))
	}
	for i, r := range out.Results {
		failed := i == 3 || i == 10
		switch {
		case failed && (r.Error == nil || r.Error.Code != "lease_lost" || r.Task != nil):
			t.Errorf("ack %d should fail with lease_lost: %+v", i, r)
		case !failed && (r.Error != nil || r.Task == nil || r.Task.Status != "done" || r.Task.ID != got[i].ID):
			t.Errorf("ack %d should succeed: %+v", i, r)
		}
	}
	if st := s.Task("q", got[3].ID).Status; st != "executing" {
		t.Fatalf("the stale-token ack changed its task: %s", st)
	}

	// 50 concurrent single acks (group-committed) each get their own answer; repeats get 409.
	var wg sync.WaitGroup
	codes := make([]int, 100)
	for i, p := range got[10:] {
		for j := 0; j < 2; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[2*i+j] = s.Ack("w", p).Status
			}()
		}
	}
	wg.Wait()
	for i := 0; i < 50; i++ {
		if a, b := codes[2*i], codes[2*i+1]; !(a == 200 && b == 409 || a == 409 && b == 200) {
			t.Fatalf("task %d acked twice concurrently: statuses %d and %d, want one 200 and one 409", i, a, b)
		}
	}
	for _, p := range got[10:] {
		if h := s.Task("q", p.ID).AttemptHistory; len(h) != 1 || h[0].Status != "succeeded" {
			t.Fatalf("history of %s: %+v", p.ID, h)
		}
	}
	for _, bad := range []any{
		map[string]any{"worker_id": "w", "acks": []any{}},
		map[string]any{"worker_id": "w", "acks": []any{map[string]any{"task_id": got[3].ID}}},
		map[string]any{"acks": []any{map[string]any{"task_id": got[3].ID, "lease_token": got[3].LeaseToken}}},
	} {
		if resp := s.Do("POST", "/workers/ack/batch", bad); resp.Status != 400 {
			t.Errorf("bad batch %v: %d", bad, resp.Status)
		}
	}
}

// A retry becomes available when its backoff ends, not on the dispatcher's next tick.
func TestRetryIsDispatchedWhenItsBackoffEnds(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) { c.DispatchInterval = time.Hour }})
	s.CreateQueue("q", nil)
	s.Enqueue("q", map[string]any{"payload": 1})
	p := s.Poll("w", []string{"q"}, 1, 5000)
	if len(p) != 1 {
		t.Fatalf("first poll: %+v", p)
	}
	s.Nack("w", p[0], "once", map[string]any{"retry_after_ms": 200})
	start := time.Now()
	again := s.Poll("w", []string{"q"}, 1, 10000)
	if len(again) != 1 || again[0].Attempt != 2 {
		t.Fatalf("the retry was not re-delivered within 10 s (the dispatcher tick is an hour): %+v", again)
	}
	t.Logf("retry re-delivered %s after the nack (backoff 200 ms)", time.Since(start))
}

// TestPollWhoseWorkerHungUpReleasesItsTasks: a worker that hangs up while the
// server claims tasks for its poll (a worker stopping mid-poll) does not leave them
// leased to nobody for the lease's length: they are released at once, not counted
// against the budget (the queue allows no retries), and the next poll gets them.
func TestPollWhoseWorkerHungUpReleasesItsTasks(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) { c.LeaseTimeout = 2 * time.Minute }})
	s.CreateQueue("q", map[string]any{"max_retries": 0})
	task := s.Enqueue("q", map[string]any{"payload": "x"})

	ctx, hangUp := context.WithCancel(context.Background())
	claimed := make(chan struct{})
	var once sync.Once
	api.SetAfterClaim(s.Server.API, func(reqCtx context.Context) {
		once.Do(func() {
			close(claimed)
			<-reqCtx.Done() // hold the answer until the server has seen the hang-up
		})
	})
	body, _ := json.Marshal(map[string]any{"worker_id": "leaver", "queues": []string{"q"}, "wait_ms": 5000})
	req, err := http.NewRequestWithContext(ctx, "POST", s.URL+"/workers/poll", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	answered := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	select {
	case <-claimed:
	case <-time.After(10 * time.Second):
		t.Fatal("the poll claimed nothing")
	}
	hangUp()
	if err := <-answered; err == nil {
		t.Fatal("the hung-up poll was answered")
	}

	got := s.Poll("stayer", []string{"q"}, 1, 5000)
	if len(got) != 1 || got[0].ID != task.ID || got[0].Attempt != 2 {
		t.Fatalf("the next poll got %+v, want attempt 2 of %s", got, task.ID)
	}
	h := s.Task("q", task.ID).AttemptHistory
	if len(h) != 2 || h[0].Status != "released" || h[0].WorkerID != "leaver" || !strings.Contains(*h[0].Error, "hung up") {
		t.Fatalf("history: %+v", h)
	}
}

// TestPollBodyBounds: a poll without acks is at most 64 KiB and one with acks at most
// 2 MiB; a larger one gets a 413 JSON error and neither acks nor claims anything.
func TestPollBodyBounds(t *testing.T) {
	t.Parallel()
	// The held task's lease must outlast the refused polls, whose multi-MiB bodies take
	// seconds under -race on a loaded box: the default 5 s let the watchdog reclaim it.
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) { c.LeaseTimeout = 10 * time.Minute }})
	s.CreateQueue("q", nil)
	for i := 0; i < 2; i++ {
		s.Enqueue("q", map[string]any{"payload": i})
	}
	s.Signals.DispatchPass.WaitUntil(t, "a dispatcher pass that buffers the tasks", func() bool {
		return s.Redis.ZCard(t.Context(), s.Server.Buffer.Key("q")).Val() == 2
	})
	held := s.Poll("w", []string{"q"}, 1, 5000)
	if len(held) != 1 {
		t.Fatalf("polled %d tasks, want 1", len(held))
	}
	tooLarge := func(what string, body any) {
		t.Helper()
		resp := s.Do("POST", "/workers/poll", body)
		if resp.Status != 413 || resp.ErrorCode(t) != "payload_too_large" {
			t.Fatalf("%s: %d %.300s", what, resp.Status, resp.Body)
		}
	}
	tooLarge("padded poll without acks", `{"worker_id": "w", "queues": ["q"]`+strings.Repeat(" ", 64<<10)+`}`)
	result := `"` + strings.Repeat("r", 700<<10) + `"` // each within the 1 MiB result limit
	ack := func(result string) string {
		return `{"task_id": "` + held[0].ID + `", "lease_token": "` + held[0].LeaseToken + `", "result": ` + result + `}`
	}
	tooLarge("poll with acks over 2 MiB", `{"worker_id": "w", "queues": ["q"], "acks": [`+ack(result)+`, `+ack(result)+`, `+ack(result)+`]}`)
	if got := s.Task("q", held[0].ID); got.Status != "executing" {
		t.Fatalf("a refused poll acked its task: %s", got.Status)
	}
	if n := s.Redis.ZCard(t.Context(), s.Server.Buffer.Key("q")).Val(); n != 1 {
		t.Fatalf("a refused poll took tasks: the buffer holds %d, want 1", n)
	}
	// A large result within the bound still travels with the poll.
	var out struct {
		Tasks []testserver.Polled
		Acks  []struct {
			Error *struct{ Code string } `json:"error"`
		}
	}
	s.Must(200, "POST", "/workers/poll", `{"worker_id": "w", "queues": ["q"], "acks": [`+ack(result)+`]}`).JSON(t, &out)
	if len(out.Acks) != 1 || out.Acks[0].Error != nil || len(out.Tasks) != 1 {
		t.Fatalf("poll with one large ack: acks %+v, %d tasks", out.Acks, len(out.Tasks))
	}
	if got := s.Task("q", held[0].ID); got.Status != "done" {
		t.Fatalf("acked task: %s", got.Status)
	}
}

// TestPollKeepsTasksWhenALaterQueueFails: when a later queue of a poll fails after
// an earlier one gave tasks, the poll hands those tasks out and logs the failure.
func TestPollKeepsTasksWhenALaterQueueFails(t *testing.T) {
	t.Parallel()
	var logs testserver.LogBuffer
	s := testserver.Start(t, testserver.Options{Log: &logs})
	s.CreateQueue("a", nil)
	s.CreateQueue("b", nil)
	task := s.Enqueue("a", map[string]any{"payload": 1})
	s.Signals.DispatchPass.WaitUntil(t, "a dispatcher pass that buffers the tasks", func() bool {
		return s.Redis.ZCard(t.Context(), s.Server.Buffer.Key("a")).Val() == 1
	})
	// A value of the wrong type under b's buffer key makes every pop from b fail.
	if err := s.Redis.Set(t.Context(), s.Server.Buffer.Key("b"), "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p := s.Poll("w", []string{"a", "b"}, 2, 0)
	if len(p) != 1 || p[0].ID != task.ID {
		t.Fatalf("poll: %+v, want the task of a", p)
	}
	if got := s.Task("a", task.ID); got.Status != "executing" {
		t.Fatalf("handed-out task: %s", got.Status)
	}
	var warned bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "poll answered with the tasks it claimed before a queue failed") &&
			strings.Contains(line, "WRONGTYPE") && strings.Contains(line, `"worker_id":"w"`) {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("the failure of queue b was not logged:\n%s", logs.String())
	}
}

// enqueueBuffered creates queue q with settings, enqueues n tasks (payloads 0..n-1)
// and waits for the dispatcher pass that puts them all in the buffer.
func enqueueBuffered(t *testing.T, s *testserver.Instance, q string, settings map[string]any, n int) {
	t.Helper()
	s.CreateQueue(q, settings)
	for i := 0; i < n; i++ {
		s.Enqueue(q, map[string]any{"payload": i})
	}
	s.Signals.DispatchPass.WaitUntil(t, "a dispatcher pass that buffers the tasks", func() bool {
		return s.Redis.ZCard(t.Context(), s.Server.Buffer.Key(q)).Val() == int64(n)
	})
}

// pollWithAcks polls queue q for up to max tasks, acking acked with the poll, and
// returns the answer.
func pollWithAcks(t *testing.T, s *testserver.Instance, q string, max int, acked ...testserver.Polled) (tasks []testserver.Polled, ackErrs []*string) {
	t.Helper()
	acks := make([]map[string]any, len(acked))
	for i, p := range acked {
		acks[i] = map[string]any{"task_id": p.ID, "lease_token": p.LeaseToken}
	}
	var out struct {
		Tasks []testserver.Polled
		Acks  []struct {
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
	}
	s.Must(200, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{q}, "max_tasks": max,
		"acks": acks}).JSON(t, &out)
	for _, a := range out.Acks {
		var code *string
		if a.Error != nil {
			code = &a.Error.Code
		}
		ackErrs = append(ackErrs, code)
	}
	return out.Tasks, ackErrs
}

// TestPollAcksAndClaimsInOneCommit: a poll carrying acks that finds work commits
// the acks and its claim in one transaction (the ack+claim group commit runs, the
// ack and claim commits do not); when that transaction fails, neither the acks nor
// the claim took effect, and the popped ids go back to the buffer.
func TestPollAcksAndClaimsInOneCommit(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	enqueueBuffered(t, s, "q", nil, 3)
	first := s.Poll("w", []string{"q"}, 1, 5000)
	if len(first) != 1 {
		t.Fatalf("polled %d tasks, want 1", len(first))
	}
	var acks, claims, both, failBoth atomic.Int32
	api.SetAckCommitHooks(s.Server.API, api.CommitHooks{Try: func(context.Context, int) { acks.Add(1) }})
	api.SetClaimCommitHooks(s.Server.API, api.CommitHooks{Try: func(context.Context, int) { claims.Add(1) }})
	api.SetAckClaimCommitHooks(s.Server.API, api.CommitHooks{Try: func(context.Context, int) {
		both.Add(1)
		if failBoth.Load() > 0 {
			panic("injected by the test")
		}
	}})
	second, errs := pollWithAcks(t, s, "q", 1, first[0])
	if len(second) != 1 || len(errs) != 1 || errs[0] != nil {
		t.Fatalf("poll with an ack: %d tasks, ack errors %v", len(second), errs)
	}
	if a, c, b := acks.Load(), claims.Load(), both.Load(); a != 0 || c != 0 || b != 1 {
		t.Fatalf("commits: %d ack, %d claim, %d ack+claim; want 0, 0, 1", a, c, b)
	}
	if st := s.Task("q", first[0].ID).Status; st != "done" {
		t.Fatalf("acked task: %s", st)
	}
	if st := s.Task("q", second[0].ID).Status; st != "executing" {
		t.Fatalf("claimed task: %s", st)
	}

	failBoth.Store(1)
	r := s.Do("POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"q"}, "max_tasks": 1,
		"acks": []map[string]any{{"task_id": second[0].ID, "lease_token": second[0].LeaseToken}}})
	if r.Status != 500 {
		t.Fatalf("poll whose ack+claim commit panicked: %d %s, want 500", r.Status, r.Body)
	}
	if st := s.Task("q", second[0].ID).Status; st != "executing" {
		t.Fatalf("the failed poll acked its task: %s", st)
	}
	failBoth.Store(0)
	third, errs := pollWithAcks(t, s, "q", 1, second[0])
	if len(third) != 1 || len(errs) != 1 || errs[0] != nil {
		t.Fatalf("poll after the failure: %d tasks, ack errors %v; want the last task and the ack", len(third), errs)
	}
	if st := s.Task("q", second[0].ID).Status; st != "done" {
		t.Fatalf("acked task after the retry: %s", st)
	}
}

// TestPollAcksFreeTheirSlotsForTheClaim: on a queue with max_concurrency 1, a
// poll acking the one executing task gets the next one: the acks commit first
// when the cap holds the pop back, and the pop is tried again.
func TestPollAcksFreeTheirSlotsForTheClaim(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	enqueueBuffered(t, s, "capped", map[string]any{"max_concurrency": 1}, 2)
	first := s.Poll("w", []string{"capped"}, 2, 5000)
	if len(first) != 1 {
		t.Fatalf("polled %d tasks under a cap of 1", len(first))
	}
	next, errs := pollWithAcks(t, s, "capped", 2, first[0])
	if len(next) != 1 || len(errs) != 1 || errs[0] != nil {
		t.Fatalf("poll acking the executing task: %d tasks, ack errors %v; want the next task", len(next), errs)
	}
	if st := s.Task("capped", first[0].ID).Status; st != "done" {
		t.Fatalf("acked task: %s", st)
	}
}
