package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

func TestScheduleLifecycle(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("reports", nil)
	s.CreateQueue("other", nil)

	created := s.Must(http.StatusCreated, "POST", "/schedules", map[string]any{
		"name": "nightly", "queue": "reports", "cron": "30 2 * * *", "timezone": "Europe/Berlin",
		"payload": map[string]any{"report": "daily"}, "priority": 3, "max_retries": 1, "timeout_seconds": 60,
	}).Map(t)
	if created["name"] != "nightly" || created["queue"] != "reports" || created["timezone"] != "Europe/Berlin" ||
		created["priority"] != 3.0 || created["max_retries"] != 1.0 || created["timeout_seconds"] != 60.0 ||
		created["paused"] != false || created["last_run_at"] != nil || created["last_task_id"] != nil {
		t.Fatalf("created schedule: %v", created)
	}
	next, err := time.Parse(time.RFC3339, created["next_run_at"].(string))
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if err != nil || next.In(berlin).Hour() != 2 || next.In(berlin).Minute() != 30 || !next.After(time.Now()) {
		t.Fatalf("next_run_at %v (%v)", created["next_run_at"], err)
	}
	for _, key := range []string{"created_at", "updated_at"} {
		if _, ok := created[key]; !ok {
			t.Errorf("schedule lacks %s", key)
		}
	}
	defaults := s.Must(http.StatusCreated, "POST", "/schedules", map[string]any{
		"name": "tick", "queue": "other", "cron": "@every 1h", "payload": nil}).Map(t)
	if defaults["timezone"] != "UTC" || defaults["priority"] != 5.0 || defaults["max_retries"] != nil || defaults["payload"] != nil {
		t.Fatalf("defaults: %v", defaults)
	}

	if code := s.Must(http.StatusConflict, "POST", "/schedules", map[string]any{
		"name": "nightly", "queue": "reports", "cron": "@daily", "payload": 1}).ErrorCode(t); code != "schedule_exists" {
		t.Fatalf("duplicate: %s", code)
	}
	got := s.Must(http.StatusOK, "GET", "/schedules/nightly", nil).Map(t)
	if got["cron"] != "30 2 * * *" {
		t.Fatalf("get: %v", got)
	}
	var list struct {
		Schedules []map[string]any `json:"schedules"`
	}
	s.Must(http.StatusOK, "GET", "/schedules", nil).JSON(t, &list)
	if len(list.Schedules) != 2 || list.Schedules[0]["name"] != "nightly" || list.Schedules[1]["name"] != "tick" {
		t.Fatalf("list: %v", list)
	}
	s.Must(http.StatusOK, "GET", "/schedules?queue=other", nil).JSON(t, &list)
	if len(list.Schedules) != 1 || list.Schedules[0]["name"] != "tick" {
		t.Fatalf("list ?queue=other: %v", list)
	}

	// PATCH recomputes next_run_at; pausing clears it, resuming sets it from now.
	patched := s.Must(http.StatusOK, "PATCH", "/schedules/nightly", map[string]any{"cron": "0 * * * *", "timezone": "UTC", "max_retries": nil}).Map(t)
	pn, _ := time.Parse(time.RFC3339, patched["next_run_at"].(string))
	if pn.Minute() != 0 || time.Until(pn) > time.Hour || patched["max_retries"] != nil || patched["priority"] != 3.0 {
		t.Fatalf("patch: %v", patched)
	}
	paused := s.Must(http.StatusOK, "PATCH", "/schedules/nightly", map[string]any{"paused": true}).Map(t)
	if paused["paused"] != true || paused["next_run_at"] != nil {
		t.Fatalf("paused: %v", paused)
	}
	resumed := s.Must(http.StatusOK, "PATCH", "/schedules/nightly", map[string]any{"paused": false}).Map(t)
	if resumed["next_run_at"] != patched["next_run_at"] {
		t.Fatalf("resumed: %v, want next_run_at %v", resumed, patched["next_run_at"])
	}

	// Trigger: a task now, with its schedule named; the tick stays.
	task := s.Must(http.StatusCreated, "POST", "/schedules/nightly/trigger", nil).Map(t)
	if task["schedule"] != "nightly" || task["queue"] != "reports" || task["priority"] != 3.0 || task["status"] != "pending" {
		t.Fatalf("triggered task: %v", task)
	}
	after := s.Must(http.StatusOK, "GET", "/schedules/nightly", nil).Map(t)
	if after["next_run_at"] != resumed["next_run_at"] || after["last_task_id"] != task["id"] {
		t.Fatalf("after trigger: %v", after)
	}
	fetched := s.Must(http.StatusOK, "GET", "/queues/reports/tasks/"+task["id"].(string), nil).Map(t)
	if fetched["schedule"] != "nightly" {
		t.Fatalf("task object lacks schedule: %v", fetched)
	}
	plain := s.Enqueue("reports", map[string]any{"payload": 1})
	if got := s.Must(http.StatusOK, "GET", "/queues/reports/tasks/"+plain.ID, nil).Map(t); got["schedule"] != nil {
		t.Fatalf("plain task has schedule %v", got["schedule"])
	}

	// A queue that schedules target cannot be deleted; the answer names them.
	refused := s.Must(http.StatusConflict, "DELETE", "/queues/other", nil)
	if refused.ErrorCode(t) != "queue_not_empty" || !strings.Contains(string(refused.Body), "tick") {
		t.Fatalf("delete of a scheduled queue: %s", refused.Body)
	}
	s.Must(http.StatusNoContent, "DELETE", "/schedules/tick", nil)
	s.Must(http.StatusNoContent, "DELETE", "/queues/other", nil)

	for _, c := range []struct{ method, path string }{
		{"GET", "/schedules/tick"}, {"PATCH", "/schedules/tick"}, {"DELETE", "/schedules/tick"}, {"POST", "/schedules/tick/trigger"},
	} {
		var body any
		if c.method == "PATCH" {
			body = map[string]any{"paused": true}
		}
		if code := s.Must(http.StatusNotFound, c.method, c.path, body).ErrorCode(t); code != "schedule_not_found" {
			t.Errorf("%s %s: %s", c.method, c.path, code)
		}
	}
}

func TestScheduleRejectsBadInputAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	s.Must(http.StatusCreated, "POST", "/schedules", map[string]any{"name": "s", "queue": "q", "cron": "@hourly", "payload": 1})
	before := s.Must(http.StatusOK, "GET", "/schedules/s", nil).Body

	good := func(extra map[string]any) map[string]any {
		m := map[string]any{"name": "new", "queue": "q", "cron": "@daily", "payload": 1}
		for k, v := range extra {
			if v == "DELETE" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"bad cron", "POST", "/schedules", good(map[string]any{"cron": "every day"}), 400, "invalid_request"},
		{"four fields", "POST", "/schedules", good(map[string]any{"cron": "* * * *"}), 400, "invalid_request"},
		{"every under a second", "POST", "/schedules", good(map[string]any{"cron": "@every 500ms"}), 400, "invalid_request"},
		{"never fires", "POST", "/schedules", good(map[string]any{"cron": "0 0 30 2 *"}), 400, "invalid_request"},
		{"zone in cron", "POST", "/schedules", good(map[string]any{"cron": "CRON_TZ=UTC 0 * * * *"}), 400, "invalid_request"},
		{"unknown timezone", "POST", "/schedules", good(map[string]any{"timezone": "Mars/Olympus"}), 400, "invalid_request"},
		{"unknown field", "POST", "/schedules", good(map[string]any{"colour": "red"}), 400, "invalid_request"},
		{"bad name", "POST", "/schedules", good(map[string]any{"name": "-x"}), 400, "invalid_request"},
		{"missing cron", "POST", "/schedules", good(map[string]any{"cron": "DELETE"}), 400, "invalid_request"},
		{"missing queue", "POST", "/schedules", good(map[string]any{"queue": "DELETE"}), 400, "invalid_request"},
		{"missing payload", "POST", "/schedules", good(map[string]any{"payload": "DELETE"}), 400, "invalid_request"},
		{"priority", "POST", "/schedules", good(map[string]any{"priority": 11}), 400, "invalid_request"},
		{"max_retries", "POST", "/schedules", good(map[string]any{"max_retries": 101}), 400, "invalid_request"},
		{"timeout", "POST", "/schedules", good(map[string]any{"timeout_seconds": 0}), 400, "invalid_request"},
		{"unknown queue", "POST", "/schedules", good(map[string]any{"queue": "nope"}), 404, "queue_not_found"},
		{"patch name", "PATCH", "/schedules/s", map[string]any{"name": "t"}, 400, "invalid_request"},
		{"patch bad cron", "PATCH", "/schedules/s", map[string]any{"cron": "61 * * * *"}, 400, "invalid_request"},
		{"patch bad zone", "PATCH", "/schedules/s", map[string]any{"timezone": "Local"}, 400, "invalid_request"},
		{"patch unknown queue", "PATCH", "/schedules/s", map[string]any{"queue": "nope"}, 404, "queue_not_found"},
		{"patch null paused", "PATCH", "/schedules/s", map[string]any{"paused": nil}, 400, "invalid_request"},
		{"patch malformed", "PATCH", "/schedules/s", `{"cron": `, 400, "invalid_request"},
	}
	for _, c := range cases {
		resp := s.Do(c.method, c.path, c.body)
		if resp.Status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, resp.Status, c.status, resp.Body)
			continue
		}
		if code := resp.ErrorCode(t); code != c.code {
			t.Errorf("%s: code %q, want %q", c.name, code, c.code)
		}
	}
	if after := s.Must(http.StatusOK, "GET", "/schedules/s", nil).Body; string(after) != string(before) {
		t.Errorf("bad input changed the schedule:\n%s\n%s", before, after)
	}
	var list struct {
		Schedules []map[string]any `json:"schedules"`
	}
	s.Must(http.StatusOK, "GET", "/schedules", nil).JSON(t, &list)
	if len(list.Schedules) != 1 {
		t.Errorf("bad input created schedules: %v", list)
	}
}

// TestScheduleFiresThroughTheServer: a replica's scheduler enqueues the tick's task,
// and the dispatcher, woken by the firing (its own tick is an hour away), hands it to
// a long-polling worker.
func TestScheduleFiresThroughTheServer(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) { c.DispatchInterval = time.Hour }})
	s.CreateQueue("cron", nil)
	sch := s.Must(http.StatusCreated, "POST", "/schedules", map[string]any{
		"name": "fast", "queue": "cron", "cron": "@every 1s", "payload": map[string]any{"n": 1}}).Map(t)
	tick, _ := time.Parse(time.RFC3339, sch["next_run_at"].(string))
	polled := s.Poll("w", []string{"cron"}, 1, 5000)
	got := time.Now()
	if len(polled) != 1 {
		t.Fatal("no scheduled task reached the worker within 5 s")
	}
	task := s.Task("cron", polled[0].ID)
	if !task.ScheduledAt.Equal(tick) {
		t.Errorf("first task scheduled at %s, want the first tick %s", task.ScheduledAt, tick)
	}
	t.Logf("tick %s reached a long-polling worker %s after it", tick.Format(time.RFC3339), got.Sub(tick).Round(time.Millisecond))
	after := s.Must(http.StatusOK, "GET", "/schedules/fast", nil).Map(t)
	if after["last_task_id"] == nil || after["last_run_at"] == nil {
		t.Errorf("after firing: %v", after)
	}
}
