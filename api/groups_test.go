package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/internal/testserver"
)

// TestFairQueueFields: a queue's fairness and group limits are set on create,
// shown by GET, changed and cleared by PATCH, and refused (400, nothing changed)
// when out of range.
func TestFairQueueFields(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	type fairQueue struct {
		Fairness            *string  `json:"fairness"`
		GroupMaxConcurrency *int     `json:"group_max_concurrency"`
		GroupRateLimit      *float64 `json:"group_rate_limit"`
		GroupRateBurst      *int     `json:"group_rate_burst"`
	}
	var q fairQueue
	s.Must(http.StatusCreated, "POST", "/queues", map[string]any{"name": "f", "fairness": "round_robin",
		"group_max_concurrency": 2, "group_rate_limit": 0.5, "group_rate_burst": 3}).JSON(t, &q)
	if q.Fairness == nil || *q.Fairness != "round_robin" || q.GroupMaxConcurrency == nil || *q.GroupMaxConcurrency != 2 ||
		q.GroupRateLimit == nil || *q.GroupRateLimit != 0.5 || q.GroupRateBurst == nil || *q.GroupRateBurst != 3 {
		t.Fatalf("created: %+v", q)
	}
	s.Must(http.StatusOK, "PATCH", "/queues/f", map[string]any{"group_max_concurrency": 5, "group_rate_burst": nil}).JSON(t, &q)
	if *q.GroupMaxConcurrency != 5 || q.GroupRateBurst != nil || *q.Fairness != "round_robin" || *q.GroupRateLimit != 0.5 {
		t.Fatalf("patched: %+v", q)
	}
	for _, bad := range []map[string]any{
		{"fairness": "fifo"}, {"fairness": 1}, {"group_max_concurrency": 0}, {"group_rate_limit": 0},
		{"group_rate_limit": -1}, {"group_rate_burst": 0}, {"group_max_concurrency": 1.5},
	} {
		if r := s.Do("PATCH", "/queues/f", bad); r.Status != http.StatusBadRequest || r.ErrorCode(t) != "invalid_request" {
			t.Errorf("PATCH %v: %d %s", bad, r.Status, r.Body)
		}
	}
	s.Must(http.StatusOK, "GET", "/queues/f", nil).JSON(t, &q)
	if *q.GroupMaxConcurrency != 5 || *q.Fairness != "round_robin" {
		t.Fatalf("after refused PATCHes: %+v", q)
	}
	s.Must(http.StatusOK, "PATCH", "/queues/f", map[string]any{"fairness": nil, "group_max_concurrency": nil,
		"group_rate_limit": nil}).JSON(t, &q)
	if q != (fairQueue{}) {
		t.Fatalf("cleared: %+v", q)
	}
	if r := s.Do("POST", "/queues", map[string]any{"name": "g", "fairness": "weighted"}); r.Status != http.StatusBadRequest {
		t.Fatalf("create with a bad fairness: %d", r.Status)
	}
	s.Must(http.StatusNotFound, "GET", "/queues/g", nil)
}

// TestTaskGroup: enqueue, batch enqueue, a debounce replacement and a workflow
// step carry the group; the task, the polled task and the list show it; the list
// filters by it; a bad group is a 400 that enqueues nothing.
func TestTaskGroup(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"fairness": "round_robin"})

	a := s.Enqueue("q", map[string]any{"payload": 1, "group": "tenant-a@x.io:1_b"})
	if a.Group == nil || *a.Group != "tenant-a@x.io:1_b" {
		t.Fatalf("enqueued: group %v", a.Group)
	}
	plain := s.Enqueue("q", map[string]any{"payload": 2, "group": nil})
	if plain.Group != nil {
		t.Fatalf("null group: %v", *plain.Group)
	}
	var batch struct {
		Tasks []testserver.Task `json:"tasks"`
	}
	s.Must(http.StatusCreated, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": []map[string]any{
		{"payload": 3, "group": "b"}, {"payload": 4}, {"payload": 5, "group": "tenant-a@x.io:1_b"},
	}}).JSON(t, &batch)
	if len(batch.Tasks) != 3 || *batch.Tasks[0].Group != "b" || batch.Tasks[1].Group != nil || *batch.Tasks[2].Group != "tenant-a@x.io:1_b" {
		t.Fatalf("batch: %+v", batch.Tasks)
	}
	if got := s.Task("q", a.ID); got.Group == nil || *got.Group != "tenant-a@x.io:1_b" {
		t.Fatalf("GET: group %v", got.Group)
	}

	listed := func(query string) map[string]bool {
		var page struct {
			Tasks []testserver.Task `json:"tasks"`
		}
		s.Must(http.StatusOK, "GET", "/queues/q/tasks"+query, nil).JSON(t, &page)
		ids := map[string]bool{}
		for _, task := range page.Tasks {
			ids[task.ID] = true
		}
		return ids
	}
	if ids := listed("?group=tenant-a@x.io:1_b"); len(ids) != 2 || !ids[a.ID] || !ids[batch.Tasks[2].ID] {
		t.Fatalf("?group=tenant-a…: %v", ids)
	}
	if ids := listed("?group=b&limit=10"); len(ids) != 1 || !ids[batch.Tasks[0].ID] {
		t.Fatalf("?group=b: %v", ids)
	}
	if ids := listed("?group=nobody"); len(ids) != 0 {
		t.Fatalf("?group=nobody: %v", ids)
	}
	if ids := listed(""); len(ids) != 5 {
		t.Fatalf("unfiltered: %d tasks", len(ids))
	}

	// Bad groups: 400, and nothing enqueued (not even the good tasks of a batch).
	long := strings.Repeat("g", 201)
	for _, bad := range []any{"", long, "a b", "ä", "a/b", "x#", 7} {
		if r := s.Do("POST", "/queues/q/tasks", map[string]any{"payload": 1, "group": bad}); r.Status != http.StatusBadRequest {
			t.Errorf("group %v: %d %s", bad, r.Status, r.Body)
		}
	}
	if r := s.Do("POST", "/queues/q/tasks/batch", map[string]any{"tasks": []map[string]any{
		{"payload": 1, "group": "ok"}, {"payload": 2, "group": "not ok"},
	}}); r.Status != http.StatusBadRequest {
		t.Fatalf("batch with a bad group: %d", r.Status)
	}
	if r := s.Do("GET", "/queues/q/tasks?group=a%20b", nil); r.Status != http.StatusBadRequest {
		t.Fatalf("list ?group=a b: %d", r.Status)
	}
	if r := s.Do("GET", "/queues/q/tasks?group=", nil); r.Status != http.StatusBadRequest {
		t.Fatalf("list ?group=: %d", r.Status)
	}
	if ids := listed(""); len(ids) != 5 {
		t.Fatalf("after the refused enqueues: %d tasks, want 5", len(ids))
	}
	if max := strings.Repeat("g", 200); s.Enqueue("q", map[string]any{"payload": 1, "group": max}).Group == nil {
		t.Fatal("a 200-character group was not kept")
	}

	// A debounce replacement takes the new request's group.
	var first, second testserver.Task
	s.Must(http.StatusCreated, "POST", "/queues/q/tasks", map[string]any{"payload": 1, "group": "old",
		"debounce_key": "k", "debounce_ms": 60_000}).JSON(t, &first)
	s.Must(http.StatusOK, "POST", "/queues/q/tasks", map[string]any{"payload": 2, "group": "new",
		"debounce_key": "k", "debounce_ms": 60_000}).JSON(t, &second)
	if second.ID != first.ID || second.Group == nil || *second.Group != "new" {
		t.Fatalf("debounced: %+v", second)
	}

	// A workflow step's task carries its group.
	var wf struct {
		Steps []struct {
			Step   string `json:"step"`
			TaskID string `json:"task_id"`
		} `json:"steps"`
	}
	s.Must(http.StatusCreated, "POST", "/workflows", map[string]any{"steps": []map[string]any{
		{"step": "one", "queue": "q", "payload": 1, "group": "wf-group"},
	}}).JSON(t, &wf)
	if len(wf.Steps) != 1 {
		t.Fatalf("workflow: %+v", wf)
	}
	if got := s.Task("q", wf.Steps[0].TaskID); got.Group == nil || *got.Group != "wf-group" {
		t.Fatalf("workflow step's task: group %v", got.Group)
	}
	if r := s.Do("POST", "/workflows", map[string]any{"steps": []map[string]any{
		{"step": "one", "queue": "q", "payload": 1, "group": "bad group"},
	}}); r.Status != http.StatusBadRequest {
		t.Fatalf("workflow with a bad group: %d", r.Status)
	}

	// A schedule's ticks (and triggers) carry its group; PATCH changes it.
	sch := s.Must(http.StatusCreated, "POST", "/schedules", map[string]any{"name": "tick", "queue": "q",
		"cron": "0 0 1 1 *", "payload": 1, "group": "sched"}).Map(t)
	if sch["group"] != "sched" {
		t.Fatalf("schedule: %v", sch)
	}
	var fired testserver.Task
	s.Must(http.StatusCreated, "POST", "/schedules/tick/trigger", nil).JSON(t, &fired)
	if fired.Group == nil || *fired.Group != "sched" {
		t.Fatalf("triggered task: group %v", fired.Group)
	}
	if r := s.Do("PATCH", "/schedules/tick", map[string]any{"group": "bad group"}); r.Status != http.StatusBadRequest {
		t.Fatalf("PATCH a bad group: %d", r.Status)
	}
	if sch = s.Must(http.StatusOK, "PATCH", "/schedules/tick", map[string]any{"group": nil}).Map(t); sch["group"] != nil {
		t.Fatalf("schedule after PATCH: %v", sch)
	}
	s.Must(http.StatusCreated, "POST", "/schedules/tick/trigger", nil).JSON(t, &fired)
	if fired.Group != nil {
		t.Fatalf("triggered task after PATCH: group %v", *fired.Group)
	}

	// The polled task shows its group.
	s.CreateQueue("p", nil)
	g := s.Enqueue("p", map[string]any{"payload": 1, "group": "polled"})
	polled := s.Poll("w", []string{"p"}, 1, 10_000)
	if len(polled) != 1 {
		t.Fatalf("polled %d tasks", len(polled))
	}
	if polled[0].ID != g.ID || polled[0].Group == nil || *polled[0].Group != "polled" {
		t.Fatalf("polled: %+v", polled[0])
	}
}
