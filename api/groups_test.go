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

// groupObject is the API's group object as tests read it.
type groupObject struct {
	Group          string   `json:"group"`
	Weight         *int     `json:"weight"`
	MaxConcurrency *int     `json:"max_concurrency"`
	RateLimit      *float64 `json:"rate_limit"`
	RateBurst      *int     `json:"rate_burst"`
	Effective      struct {
		Weight         int      `json:"weight"`
		MaxConcurrency *int     `json:"max_concurrency"`
		RateLimit      *float64 `json:"rate_limit"`
		RateBurst      *int     `json:"rate_burst"`
	} `json:"effective"`
	Pending   int64 `json:"pending"`
	Claimed   int64 `json:"claimed"`
	Executing int64 `json:"executing"`
	Dead      int64 `json:"dead"`
}

type groupPage struct {
	Groups     []groupObject `json:"groups"`
	NextCursor *string       `json:"next_cursor"`
}

// TestGroupRoutes: PUT sets a group's overrides (effective values beside them, the
// queue's defaults where none), mirrored into Redis; GET shows them with the
// group's counts; DELETE forgets them; a group with neither tasks nor overrides is
// group_not_found; the list pages by name, and active=true lists only groups with
// waiting or running work.
func TestGroupRoutes(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"fairness": "round_robin", "paused": true, "group_max_concurrency": 3,
		"group_rate_limit": 2.5})

	var g groupObject
	s.Must(http.StatusOK, "PUT", "/queues/q/groups/vip", map[string]any{"weight": 5, "max_concurrency": 10}).JSON(t, &g)
	if g.Group != "vip" || *g.Weight != 5 || *g.MaxConcurrency != 10 || g.RateLimit != nil || g.Effective.Weight != 5 ||
		*g.Effective.MaxConcurrency != 10 || *g.Effective.RateLimit != 2.5 || *g.Effective.RateBurst != 3 || g.Pending != 0 {
		t.Fatalf("PUT: %+v", g)
	}
	hash := s.Redis.HGetAll(t.Context(), s.Config.RedisPrefix+":{q:q}:f:set").Val()
	if hash["vip"] != "5 10 - -" {
		t.Fatalf("the overrides mirrored into Redis: %v", hash)
	}

	for range 3 {
		s.Enqueue("q", map[string]any{"payload": 1, "group": "vip"})
	}
	s.Enqueue("q", map[string]any{"payload": 1, "group": "plain"})
	s.Must(http.StatusOK, "GET", "/queues/q/groups/vip", nil).JSON(t, &g)
	if g.Pending != 3 || *g.Weight != 5 {
		t.Fatalf("GET vip: %+v", g)
	}
	s.Must(http.StatusOK, "GET", "/queues/q/groups/plain", nil).JSON(t, &g)
	if g.Pending != 1 || g.Weight != nil || g.Effective.Weight != 1 || *g.Effective.MaxConcurrency != 3 {
		t.Fatalf("GET plain: %+v", g)
	}

	// Not found, and bad input.
	if r := s.Do("GET", "/queues/q/groups/nobody", nil); r.Status != http.StatusNotFound || r.ErrorCode(t) != "group_not_found" {
		t.Fatalf("GET nobody: %d %s", r.Status, r.Body)
	}
	if r := s.Do("DELETE", "/queues/q/groups/nobody", nil); r.Status != http.StatusNotFound || r.ErrorCode(t) != "group_not_found" {
		t.Fatalf("DELETE nobody: %d %s", r.Status, r.Body)
	}
	if r := s.Do("GET", "/queues/none/groups/vip", nil); r.Status != http.StatusNotFound || r.ErrorCode(t) != "queue_not_found" {
		t.Fatalf("GET of a missing queue: %d %s", r.Status, r.Body)
	}
	if r := s.Do("PUT", "/queues/none/groups/vip", map[string]any{}); r.Status != http.StatusNotFound || r.ErrorCode(t) != "queue_not_found" {
		t.Fatalf("PUT into a missing queue: %d %s", r.Status, r.Body)
	}
	if r := s.Do("GET", "/queues/none/groups", nil); r.Status != http.StatusNotFound || r.ErrorCode(t) != "queue_not_found" {
		t.Fatalf("list of a missing queue: %d %s", r.Status, r.Body)
	}
	for _, bad := range []map[string]any{{"weight": 0}, {"weight": 1001}, {"max_concurrency": 0}, {"rate_limit": 0},
		{"rate_burst": 0}, {"colour": 1}} {
		if r := s.Do("PUT", "/queues/q/groups/vip", bad); r.Status != http.StatusBadRequest {
			t.Errorf("PUT %v: %d", bad, r.Status)
		}
	}
	if r := s.Do("PUT", "/queues/q/groups/a%20b", map[string]any{}); r.Status != http.StatusBadRequest {
		t.Fatalf("PUT a bad group name: %d", r.Status)
	}
	for _, q := range []string{"?limit=0", "?limit=501", "?active=yes", "?cursor=!!"} {
		if r := s.Do("GET", "/queues/q/groups"+q, nil); r.Status != http.StatusBadRequest {
			t.Errorf("list %s: %d", q, r.Status)
		}
	}
	s.Must(http.StatusOK, "GET", "/queues/q/groups/vip", nil).JSON(t, &g)
	if *g.Weight != 5 || *g.MaxConcurrency != 10 {
		t.Fatalf("after the refused PUTs: %+v", g)
	}

	// An idle group with overrides only is listed, but not as active.
	s.Must(http.StatusOK, "PUT", "/queues/q/groups/idle", map[string]any{"rate_limit": 1}).JSON(t, &g)
	var page groupPage
	s.Must(http.StatusOK, "GET", "/queues/q/groups", nil).JSON(t, &page)
	if names := groupNames(page); names != "idle plain vip" || page.NextCursor != nil {
		t.Fatalf("list: %q, next %v", names, page.NextCursor)
	}
	s.Must(http.StatusOK, "GET", "/queues/q/groups?active=true", nil).JSON(t, &page)
	if names := groupNames(page); names != "plain vip" {
		t.Fatalf("active: %q", names)
	}
	// Pages of one.
	var all []string
	cursor := ""
	for range 5 {
		s.Must(http.StatusOK, "GET", "/queues/q/groups?limit=1"+cursor, nil).JSON(t, &page)
		all = append(all, groupNames(page))
		if page.NextCursor == nil {
			break
		}
		cursor = "&cursor=" + *page.NextCursor
	}
	if strings.Join(all, ",") != "idle,plain,vip" {
		t.Fatalf("pages of one: %q", all)
	}

	// DELETE forgets the overrides (the tasks stay), in PostgreSQL and Redis.
	s.Must(http.StatusNoContent, "DELETE", "/queues/q/groups/vip", nil)
	s.Must(http.StatusOK, "GET", "/queues/q/groups/vip", nil).JSON(t, &g)
	if g.Weight != nil || g.MaxConcurrency != nil || g.Pending != 3 {
		t.Fatalf("after DELETE: %+v", g)
	}
	if hash := s.Redis.HGetAll(t.Context(), s.Config.RedisPrefix+":{q:q}:f:set").Val(); hash["vip"] != "" {
		t.Fatalf("the overrides left in Redis: %v", hash)
	}
	s.Must(http.StatusNoContent, "DELETE", "/queues/q/groups/idle", nil)
	s.Must(http.StatusNotFound, "GET", "/queues/q/groups/idle", nil)
}

func groupNames(p groupPage) string {
	names := make([]string, len(p.Groups))
	for i, g := range p.Groups {
		names[i] = g.Group
	}
	return strings.Join(names, " ")
}
