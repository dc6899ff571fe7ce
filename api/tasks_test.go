package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testserver"
)

// taskCount counts a queue's tasks through the listing API.
func taskCount(t *testing.T, s *testserver.Instance, queue string) int {
	t.Helper()
	n, cursor := 0, ""
	for {
		var page struct {
			Tasks      []testserver.Task `json:"tasks"`
			NextCursor *string           `json:"next_cursor"`
		}
		s.Must(http.StatusOK, "GET", "/queues/"+queue+"/tasks?limit=500&cursor="+cursor, nil).JSON(t, &page)
		n += len(page.Tasks)
		if page.NextCursor == nil {
			return n
		}
		cursor = *page.NextCursor
	}
}

func TestEnqueueAndGet(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"max_retries": 4})

	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	resp := s.Must(http.StatusCreated, "POST", "/queues/q/tasks", map[string]any{
		"payload": map[string]any{"to": "a@b.c", "n": []int{1, 2}}, "priority": 2,
		"scheduled_at": at.Format(time.RFC3339), "timeout_seconds": 30,
	})
	var task testserver.Task
	resp.JSON(t, &task)
	if task.Status != "pending" || task.Priority != 2 || task.MaxRetries != 4 || task.Attempts != 0 ||
		!task.ScheduledAt.Equal(at) || task.Queue != "q" {
		t.Fatalf("enqueued task: %+v", task)
	}
	m := resp.Map(t)
	for _, field := range []string{"id", "queue", "payload", "priority", "status", "scheduled_at", "attempts",
		"max_retries", "timeout_seconds", "idempotency_key", "last_error", "result", "claimed_by",
		"heartbeat_at", "lease_expires_at", "cancel_requested", "replayed_from", "replay_count",
		"created_at", "updated_at", "finished_at"} {
		if _, ok := m[field]; !ok {
			t.Errorf("task object lacks %q", field)
		}
	}
	if !strings.HasSuffix(m["created_at"].(string), "Z") {
		t.Errorf("times must be UTC RFC 3339: created_at %v", m["created_at"])
	}

	got := s.Task("q", task.ID)
	if string(got.Payload) != `{"n":[1,2],"to":"a@b.c"}` || got.AttemptHistory == nil || len(got.AttemptHistory) != 0 {
		t.Fatalf("get task: payload %s history %v", got.Payload, got.AttemptHistory)
	}

	// Defaults: priority 5, the queue's max_retries, scheduled now.
	def := s.Enqueue("q", map[string]any{"payload": "x"})
	if def.Priority != 5 || def.MaxRetries != 4 || def.ScheduledAt.After(def.CreatedAt) {
		t.Fatalf("defaults: %+v", def)
	}
	if payload := s.Enqueue("q", map[string]any{"payload": nil}).Payload; string(payload) != "null" {
		t.Fatalf("a null payload is a JSON value: %s", payload)
	}

	if code := s.Must(404, "GET", "/queues/q/tasks/0190a4a0-0000-7000-8000-000000000000", nil).ErrorCode(t); code != "task_not_found" {
		t.Fatalf("code %q", code)
	}
	if code := s.Must(404, "GET", "/queues/q/tasks/not-a-uuid", nil).ErrorCode(t); code != "task_not_found" {
		t.Fatalf("code %q", code)
	}
	if code := s.Must(404, "GET", "/queues/other/tasks/"+task.ID, nil).ErrorCode(t); code != "queue_not_found" {
		t.Fatalf("code %q", code)
	}
}

func TestEnqueueRejectsBadInputAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: nil})
	s.CreateQueue("q", nil)
	big := `"` + strings.Repeat("x", 1<<20) + `"`
	cases := []struct {
		name, path string
		body       any
		status     int
		code       string
	}{
		{"missing payload", "/queues/q/tasks", map[string]any{"priority": 1}, 400, "invalid_request"},
		{"priority 0", "/queues/q/tasks", map[string]any{"payload": 1, "priority": 0}, 400, "invalid_request"},
		{"priority 11", "/queues/q/tasks", map[string]any{"payload": 1, "priority": 11}, 400, "invalid_request"},
		{"priority fraction", "/queues/q/tasks", map[string]any{"payload": 1, "priority": 1.5}, 400, "invalid_request"},
		{"bad schedule", "/queues/q/tasks", map[string]any{"payload": 1, "scheduled_at": "tomorrow"}, 400, "invalid_request"},
		{"retries 101", "/queues/q/tasks", map[string]any{"payload": 1, "max_retries": 101}, 400, "invalid_request"},
		{"timeout 0", "/queues/q/tasks", map[string]any{"payload": 1, "timeout_seconds": 0}, 400, "invalid_request"},
		{"empty key", "/queues/q/tasks", map[string]any{"payload": 1, "idempotency_key": ""}, 400, "invalid_request"},
		{"unknown field", "/queues/q/tasks", map[string]any{"payload": 1, "queue": "q"}, 400, "invalid_request"},
		{"malformed", "/queues/q/tasks", `{"payload": }`, 400, "invalid_request"},
		{"payload too large", "/queues/q/tasks", `{"payload": ` + big + `}`, 413, "payload_too_large"},
		{"body far too large", "/queues/q/tasks", `{"payload": [` + big + `,` + big + `]}`, 413, "payload_too_large"},
		{"unknown queue", "/queues/nope/tasks", map[string]any{"payload": 1}, 404, "queue_not_found"},
		{"batch empty", "/queues/q/tasks/batch", map[string]any{"tasks": []any{}}, 400, "invalid_request"},
		{"batch one bad", "/queues/q/tasks/batch", map[string]any{"tasks": []any{
			map[string]any{"payload": 1}, map[string]any{"payload": 2, "priority": 99}}}, 400, "invalid_request"},
		{"batch too many", "/queues/q/tasks/batch", map[string]any{"tasks": make([]map[string]any, 1001)}, 400, "invalid_request"},
		{"batch unknown queue", "/queues/nope/tasks/batch", map[string]any{"tasks": []any{map[string]any{"payload": 1}}}, 404, "queue_not_found"},
		{"batch oversized payload", "/queues/q/tasks/batch", `{"tasks": [{"payload": 1}, {"payload": ` + big + `}]}`, 413, "payload_too_large"},
	}
	for _, tc := range cases {
		resp := s.Do("POST", tc.path, tc.body)
		if resp.Status != tc.status {
			t.Errorf("%s: status %d, want %d: %.200s", tc.name, resp.Status, tc.status, resp.Body)
			continue
		}
		if code := resp.ErrorCode(t); code != tc.code {
			t.Errorf("%s: code %q, want %q", tc.name, code, tc.code)
		}
	}
	if n := taskCount(t, s, "q"); n != 0 {
		t.Fatalf("bad requests created %d tasks", n)
	}
	for _, q := range []string{"/queues/q/tasks?status=bogus", "/queues/q/tasks?limit=0", "/queues/q/tasks?limit=501",
		"/queues/q/tasks?cursor=zzz", "/queues/q/tasks?created_after=yesterday"} {
		if resp := s.Do("GET", q, nil); resp.Status != 400 || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("GET %s: %d %s", q, resp.Status, resp.Body)
		}
	}
	if code := s.Must(404, "GET", "/queues/nope/tasks", nil).ErrorCode(t); code != "queue_not_found" {
		t.Fatalf("list unknown queue: %q", code)
	}
}

func TestBatchEnqueueIsAllOrNothing(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	tasks := make([]map[string]any, 1000)
	for i := range tasks {
		tasks[i] = map[string]any{"payload": map[string]any{"i": i}, "priority": 1 + i%10}
	}
	var out struct {
		Tasks []testserver.Task `json:"tasks"`
	}
	s.Must(http.StatusCreated, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": tasks}).JSON(t, &out)
	if len(out.Tasks) != 1000 {
		t.Fatalf("batch returned %d tasks", len(out.Tasks))
	}
	for i, task := range out.Tasks {
		if want := fmt.Sprintf(`{"i":%d}`, i); string(task.Payload) != want || task.Priority != 1+i%10 {
			t.Fatalf("task %d out of order: %s priority %d", i, task.Payload, task.Priority)
		}
	}
	// A key conflict in the middle of a batch rolls the whole batch back.
	s.Must(http.StatusCreated, "POST", "/queues/q/tasks", map[string]any{"payload": "a", "idempotency_key": "k"})
	resp := s.Do("POST", "/queues/q/tasks/batch", map[string]any{"tasks": []any{
		map[string]any{"payload": "new"}, map[string]any{"payload": "different", "idempotency_key": "k"}}})
	if resp.Status != http.StatusConflict || resp.ErrorCode(t) != "idempotency_conflict" {
		t.Fatalf("conflicting batch: %d %s", resp.Status, resp.Body)
	}
	if n := taskCount(t, s, "q"); n != 1001 {
		t.Fatalf("after the refused batch the queue holds %d tasks, want 1001", n)
	}
}

func TestIdempotentEnqueue(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)

	body := map[string]any{"payload": map[string]any{"order": 42, "items": []string{"a", "b"}}, "priority": 3}
	var wg sync.WaitGroup
	results := make([]testserver.Response, 20)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = testserver.Do(t, s.URL, "POST", "/queues/q/tasks", body, http.Header{"Idempotency-Key": {"order-42"}})
		}()
	}
	wg.Wait()
	created, ids := 0, map[string]bool{}
	for _, r := range results {
		var task testserver.Task
		r.JSON(t, &task)
		switch r.Status {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Fatalf("concurrent identical enqueue: %d %s", r.Status, r.Body)
		}
		ids[task.ID] = true
	}
	if created != 1 || len(ids) != 1 {
		t.Fatalf("20 identical enqueues: %d created, %d distinct ids; want 1 and 1", created, len(ids))
	}
	if n := taskCount(t, s, "q"); n != 1 {
		t.Fatalf("queue holds %d tasks", n)
	}

	// Same key in the body, keys reordered in the payload: still the same request.
	same := s.Do("POST", "/queues/q/tasks", `{"idempotency_key": "order-42", "priority": 3, "payload": {"items": ["a","b"], "order": 42}}`)
	if same.Status != http.StatusOK {
		t.Fatalf("same request again: %d %s", same.Status, same.Body)
	}
	for _, diff := range []map[string]any{
		{"payload": map[string]any{"order": 43}, "idempotency_key": "order-42"},
		{"payload": body["payload"], "priority": 4, "idempotency_key": "order-42"},
		{"payload": body["payload"], "priority": 3, "max_retries": 1, "idempotency_key": "order-42"},
	} {
		resp := s.Do("POST", "/queues/q/tasks", diff)
		if resp.Status != http.StatusConflict || resp.ErrorCode(t) != "idempotency_conflict" {
			t.Fatalf("different request, same key: %d %s", resp.Status, resp.Body)
		}
	}
	if resp := testserver.Do(t, s.URL, "POST", "/queues/q/tasks", map[string]any{"payload": 1, "idempotency_key": "a"},
		http.Header{"Idempotency-Key": {"b"}}); resp.Status != 400 {
		t.Fatalf("header and body keys differ: %d", resp.Status)
	}
	if n := taskCount(t, s, "q"); n != 1 {
		t.Fatalf("queue holds %d tasks after conflicts", n)
	}
}

func TestListTasksPaginatesAndFilters(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	var all []string
	for i := 0; i < 7; i++ {
		all = append(all, s.Enqueue("q", map[string]any{"payload": i}).ID)
	}
	cancelled := s.Must(200, "DELETE", "/queues/q/tasks/"+all[2], nil)
	_ = cancelled

	var seen []string
	cursor := ""
	pages := 0
	for {
		var page struct {
			Tasks      []testserver.Task `json:"tasks"`
			NextCursor *string           `json:"next_cursor"`
		}
		s.Must(200, "GET", "/queues/q/tasks?limit=3&cursor="+url.QueryEscape(cursor), nil).JSON(t, &page)
		pages++
		for _, task := range page.Tasks {
			seen = append(seen, task.ID)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if pages != 3 || len(seen) != 7 {
		t.Fatalf("pagination: %d pages, %d tasks", pages, len(seen))
	}
	for i := range seen { // newest first
		if seen[i] != all[len(all)-1-i] {
			t.Fatalf("order: position %d is %s, want %s", i, seen[i], all[len(all)-1-i])
		}
	}
	var filtered struct {
		Tasks []testserver.Task `json:"tasks"`
	}
	s.Must(200, "GET", "/queues/q/tasks?status=cancelled", nil).JSON(t, &filtered)
	if len(filtered.Tasks) != 1 || filtered.Tasks[0].ID != all[2] {
		t.Fatalf("status filter: %+v", filtered.Tasks)
	}
	future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	s.Must(200, "GET", "/queues/q/tasks?created_after="+future, nil).JSON(t, &filtered)
	if len(filtered.Tasks) != 0 {
		t.Fatalf("created_after filter: %d tasks", len(filtered.Tasks))
	}
	s.Must(200, "GET", "/queues/q/tasks?created_before="+future, nil).JSON(t, &filtered)
	if len(filtered.Tasks) != 7 {
		t.Fatalf("created_before filter: %d tasks", len(filtered.Tasks))
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)

	pending := s.Enqueue("q", map[string]any{"payload": 1, "scheduled_at": time.Now().Add(time.Hour).Format(time.RFC3339)})
	var got testserver.Task
	s.Must(200, "DELETE", "/queues/q/tasks/"+pending.ID, nil).JSON(t, &got)
	if got.Status != "cancelled" || got.FinishedAt == nil {
		t.Fatalf("cancel pending: %+v", got)
	}
	if code := s.Must(409, "DELETE", "/queues/q/tasks/"+pending.ID, nil).ErrorCode(t); code != "task_not_cancellable" {
		t.Fatalf("cancel twice: %q", code)
	}
	if code := s.Must(404, "DELETE", "/queues/q/tasks/0190a4a0-0000-7000-8000-000000000000", nil).ErrorCode(t); code != "task_not_found" {
		t.Fatalf("cancel missing: %q", code)
	}

	// A buffered (claimed) task is cancelled at once and never delivered.
	buffered := s.Enqueue("q", map[string]any{"payload": 2})
	s.Signals.DispatchPass.WaitUntil(t, "the dispatcher's pass that buffers the task", func() bool { return s.Task("q", buffered.ID).Status == "claimed" })
	s.Must(200, "DELETE", "/queues/q/tasks/"+buffered.ID, nil)
	if p := s.Poll("w", []string{"q"}, 10, 0); len(p) != 0 {
		t.Fatalf("a cancelled task was delivered: %+v", p)
	}

	// An executing task: 202, the worker hears it on heartbeat, a nack ends it cancelled.
	running := s.Enqueue("q", map[string]any{"payload": 3})
	p := s.Poll("w", []string{"q"}, 1, 5000)
	if len(p) != 1 || p[0].ID != running.ID {
		t.Fatalf("poll: %+v", p)
	}
	s.Must(202, "DELETE", "/queues/q/tasks/"+running.ID, nil).JSON(t, &got)
	if got.Status != "executing" || !got.CancelRequested {
		t.Fatalf("cancel executing: %+v", got)
	}
	hb := s.Heartbeat("w", p[0]).Map(t)
	if hb["cancel_requested"] != true {
		t.Fatalf("heartbeat did not carry the cancel: %v", hb)
	}
	var nacked testserver.Task
	s.Nack("w", p[0], "stopped on request", nil).JSON(t, &nacked)
	if nacked.Status != "cancelled" {
		t.Fatalf("nack after cancel: %s", nacked.Status)
	}
	if h := s.Task("q", running.ID).AttemptHistory; len(h) != 1 || h[0].Status != "cancelled" {
		t.Fatalf("history: %+v", h)
	}

	// An ack after a cancel request still records done: the work happened.
	acked := s.Enqueue("q", map[string]any{"payload": 4})
	p = s.Poll("w", []string{"q"}, 1, 5000)
	if len(p) != 1 || p[0].ID != acked.ID {
		t.Fatalf("poll: %+v", p)
	}
	s.Must(202, "DELETE", "/queues/q/tasks/"+acked.ID, nil)
	var done testserver.Task
	s.Ack("w", p[0]).JSON(t, &done)
	if done.Status != "done" {
		t.Fatalf("ack after cancel request: %s", done.Status)
	}
}

// TestAttemptsOfAnExecutingTask: GET of an executing task lists its current attempt
// (read from the task row: the claim writes no attempt row, migration 0033), and
// after a nack, a retry and an ack the history is complete, in order, and each
// outcome is counted once in the queue's stats.
func TestAttemptsOfAnExecutingTask(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	task := s.Enqueue("q", map[string]any{"payload": 1})

	wantHistory := func(what string, statuses ...string) {
		t.Helper()
		h := s.Task("q", task.ID).AttemptHistory
		ok := len(h) == len(statuses)
		for i := 0; ok && i < len(h); i++ {
			ok = h[i].Attempt == i+1 && h[i].Status == statuses[i] && h[i].WorkerID == "w" &&
				(statuses[i] == "executing") == (h[i].FinishedAt == nil)
		}
		if !ok {
			t.Fatalf("%s: attempt history %+v, want %v", what, h, statuses)
		}
	}
	p := s.Poll("w", []string{"q"}, 1, 5000)
	if len(p) != 1 {
		t.Fatalf("poll: %+v", p)
	}
	wantHistory("executing", "executing")
	s.Nack("w", p[0], "boom", map[string]any{"retry_after_ms": 0})
	wantHistory("after the nack", "failed")
	if p = s.Poll("w", []string{"q"}, 1, 5000); len(p) != 1 {
		t.Fatalf("poll of the retry: %+v", p)
	}
	wantHistory("the retry", "failed", "executing")
	s.Ack("w", p[0])
	wantHistory("done", "failed", "succeeded")

	var st struct {
		ErrorRate        float64 `json:"error_rate"`
		ThroughputPerSec float64 `json:"throughput_per_sec"`
	}
	s.Must(200, "GET", "/queues/q/stats", nil).JSON(t, &st)
	// One failed of two finished attempts, each counted once.
	if st.ErrorRate != 0.5 || st.ThroughputPerSec <= 0 {
		t.Fatalf("stats: %+v, want error rate 0.5", st)
	}
}
