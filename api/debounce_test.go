package api_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testserver"
)

// TestDebounceReplacesTheWaitingTask: a second enqueue with the key answers 200 with
// the same task, its new payload and priority, due later, debounced 1; a third whose
// quiet period passes debounce_max_ms is due at the first enqueue + the bound; GET
// and the list show the key and the count; another key creates another task.
func TestDebounceReplacesTheWaitingTask(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)

	var first, second, other testserver.Task
	s.Must(http.StatusCreated, "POST", "/queues/q/tasks", map[string]any{
		"payload": map[string]any{"rev": 1}, "debounce_key": "doc-7", "debounce_ms": 60_000,
	}).JSON(t, &first)
	if first.Status != "pending" || first.DebounceKey == nil || *first.DebounceKey != "doc-7" || first.Debounced != 0 ||
		first.ScheduledAt.Sub(first.CreatedAt) != time.Minute {
		t.Fatalf("first enqueue: %+v", first)
	}
	s.Must(http.StatusOK, "POST", "/queues/q/tasks", map[string]any{
		"payload": map[string]any{"rev": 2}, "priority": 1, "debounce_key": "doc-7", "debounce_ms": 120_000,
		"debounce_max_ms": 600_000,
	}).JSON(t, &second)
	if second.ID != first.ID || string(second.Payload) != `{"rev":2}` || second.Priority != 1 || second.Debounced != 1 ||
		!second.ScheduledAt.After(first.ScheduledAt) {
		t.Fatalf("second enqueue: %+v (payload %s)", second, second.Payload)
	}
	// A quiet period that would end past debounce_max_ms (now + 10 min > the first
	// enqueue + 10 min) is capped: due at the first enqueue + the bound.
	var capped testserver.Task
	s.Must(http.StatusOK, "POST", "/queues/q/tasks", map[string]any{
		"payload": map[string]any{"rev": 2}, "priority": 1, "debounce_key": "doc-7", "debounce_ms": 600_000,
		"debounce_max_ms": 600_000,
	}).JSON(t, &capped)
	if capped.ID != first.ID || capped.Debounced != 2 || capped.ScheduledAt.Sub(first.CreatedAt) != 10*time.Minute {
		t.Fatalf("capped enqueue: %+v, want due 10 minutes after %s", capped, first.CreatedAt)
	}
	got := s.Task("q", first.ID)
	if got.Debounced != 2 || got.DebounceKey == nil || *got.DebounceKey != "doc-7" || string(got.Payload) != `{"rev":2}` {
		t.Fatalf("GET: %+v", got)
	}
	s.Must(http.StatusCreated, "POST", "/queues/q/tasks", map[string]any{
		"payload": nil, "debounce_key": "doc-8", "debounce_ms": 1000,
	}).JSON(t, &other)
	var page struct {
		Tasks []testserver.Task `json:"tasks"`
	}
	s.Must(http.StatusOK, "GET", "/queues/q/tasks", nil).JSON(t, &page)
	if len(page.Tasks) != 2 {
		t.Fatalf("list: %d tasks, want 2", len(page.Tasks))
	}
	for _, task := range page.Tasks {
		if task.ID == first.ID && task.Debounced != 2 || task.ID == other.ID && task.Debounced != 0 {
			t.Fatalf("listed: %+v", task)
		}
	}

	// A batch: a debounced task replaces the waiting one; a plain one is created.
	var batch struct {
		Tasks []testserver.Task `json:"tasks"`
	}
	s.Must(http.StatusCreated, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": []map[string]any{
		{"payload": 3, "debounce_key": "doc-7", "debounce_ms": 60_000},
		{"payload": "plain"},
	}}).JSON(t, &batch)
	if len(batch.Tasks) != 2 || batch.Tasks[0].ID != first.ID || batch.Tasks[0].Debounced != 3 || batch.Tasks[1].DebounceKey != nil {
		t.Fatalf("batch: %+v", batch.Tasks)
	}
}

// TestDebounceBadInput: each bad combination is a 400 JSON error, and nothing is
// enqueued or replaced.
func TestDebounceBadInput(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	var held testserver.Task
	s.Must(http.StatusCreated, "POST", "/queues/q/tasks", map[string]any{
		"payload": 1, "debounce_key": "k", "debounce_ms": 60_000,
	}).JSON(t, &held)
	long := strings.Repeat("k", 256)
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"key without ms", map[string]any{"payload": 2, "debounce_key": "k"}},
		{"ms without key", map[string]any{"payload": 2, "debounce_ms": 1000}},
		{"max without key", map[string]any{"payload": 2, "debounce_max_ms": 1000}},
		{"empty key", map[string]any{"payload": 2, "debounce_key": "", "debounce_ms": 1000}},
		{"key too long", map[string]any{"payload": 2, "debounce_key": long, "debounce_ms": 1000}},
		{"ms zero", map[string]any{"payload": 2, "debounce_key": "k", "debounce_ms": 0}},
		{"ms over a day", map[string]any{"payload": 2, "debounce_key": "k", "debounce_ms": 86_400_001}},
		{"max below ms", map[string]any{"payload": 2, "debounce_key": "k", "debounce_ms": 1000, "debounce_max_ms": 999}},
		{"max over 30 days", map[string]any{"payload": 2, "debounce_key": "k", "debounce_ms": 1000, "debounce_max_ms": 2_592_000_001}},
		{"with an idempotency key", map[string]any{"payload": 2, "debounce_key": "k", "debounce_ms": 1000, "idempotency_key": "i"}},
		{"with scheduled_at", map[string]any{"payload": 2, "debounce_key": "k", "debounce_ms": 1000,
			"scheduled_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}},
		{"ms not an integer", map[string]any{"payload": 2, "debounce_key": "k", "debounce_ms": 1.5}},
		{"key not a string", map[string]any{"payload": 2, "debounce_key": 7, "debounce_ms": 1000}},
	} {
		resp := s.Do("POST", "/queues/q/tasks", tc.body)
		if resp.Status != http.StatusBadRequest || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s, want 400 invalid_request", tc.name, resp.Status, resp.Body)
		}
		resp = s.Do("POST", "/queues/q/tasks/batch", map[string]any{"tasks": []map[string]any{{"payload": 0}, tc.body}})
		if resp.Status != http.StatusBadRequest || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("%s, in a batch: %d %s, want 400 invalid_request", tc.name, resp.Status, resp.Body)
		}
	}
	resp := testserver.Do(t, s.URL, "POST", "/queues/q/tasks", map[string]any{"payload": 2, "debounce_key": "k", "debounce_ms": 1000},
		http.Header{"Idempotency-Key": {"i"}})
	if resp.Status != http.StatusBadRequest {
		t.Errorf("with an Idempotency-Key header: %d %s, want 400", resp.Status, resp.Body)
	}
	if n := taskCount(t, s, "q"); n != 1 {
		t.Fatalf("%d tasks after the refusals, want 1", n)
	}
	if got := s.Task("q", held.ID); got.Debounced != 0 || string(got.Payload) != "1" {
		t.Fatalf("the waiting task changed: %+v", got)
	}
	if resp := s.Do("POST", "/queues/nope/tasks", map[string]any{"payload": 1, "debounce_key": "k", "debounce_ms": 1000}); resp.Status != http.StatusNotFound {
		t.Fatalf("unknown queue: %d %s", resp.Status, resp.Body)
	}
}

// TestDebounceRaceOnTwoReplicas: 50 enqueues of one key at once, spread over two
// replicas of one database, create one task (one 201) that the 49 others replace
// (49 × 200): it ends with debounced 49 and the payload of one of them.
func TestDebounceRaceOnTwoReplicas(t *testing.T) {
	t.Parallel()
	a := testserver.Start(t, testserver.Options{})
	b := testserver.Start(t, testserver.Options{DatabaseURL: a.Config.DatabaseURL, RedisPrefix: a.Config.RedisPrefix})
	a.CreateQueue("q", nil)
	const n = 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	statuses := make(chan int, n)
	for i := range n {
		replica := a
		if i%2 == 1 {
			replica = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp := replica.Do("POST", "/queues/q/tasks", map[string]any{
				"payload": map[string]any{"i": i}, "debounce_key": "burst", "debounce_ms": 60_000,
			})
			statuses <- resp.Status
		}()
	}
	close(start)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for st := range statuses {
		count[st]++
	}
	if count[http.StatusCreated] != 1 || count[http.StatusOK] != n-1 {
		t.Fatalf("answers %v, want one 201 and %d × 200", count, n-1)
	}
	var page struct {
		Tasks []testserver.Task `json:"tasks"`
	}
	b.Must(http.StatusOK, "GET", "/queues/q/tasks", nil).JSON(t, &page)
	if len(page.Tasks) != 1 || page.Tasks[0].Debounced != n-1 {
		t.Fatalf("tasks after the race: %+v", page.Tasks)
	}
	if !strings.HasPrefix(string(page.Tasks[0].Payload), `{"i":`) {
		t.Fatalf("payload %s", page.Tasks[0].Payload)
	}
}
