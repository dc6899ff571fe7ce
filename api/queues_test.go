package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/internal/testserver"
)

func TestQueueLifecycle(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})

	created := s.Must(http.StatusCreated, "POST", "/queues", map[string]any{
		"name": "emails", "rate_limit": 2.5, "max_concurrency": 4, "backoff_base_ms": 200,
	}).Map(t)
	if created["name"] != "emails" || created["max_retries"] != 3.0 || created["rate_burst"] != 3.0 ||
		created["max_concurrency"] != 4.0 || created["backoff_base_ms"] != 200.0 || created["paused"] != false {
		t.Fatalf("created queue has wrong fields: %v", created)
	}

	if code := s.Must(http.StatusConflict, "POST", "/queues", map[string]any{"name": "emails"}).ErrorCode(t); code != "queue_exists" {
		t.Fatalf("duplicate queue: code %q", code)
	}
	got := s.Must(http.StatusOK, "GET", "/queues/emails", nil).Map(t)
	if got["rate_limit"] != 2.5 {
		t.Fatalf("get queue: %v", got)
	}

	patched := s.Must(http.StatusOK, "PATCH", "/queues/emails", map[string]any{"rate_limit": nil, "max_retries": 7, "paused": true}).Map(t)
	if patched["rate_limit"] != nil || patched["rate_burst"] != nil || patched["max_retries"] != 7.0 || patched["paused"] != true || patched["max_concurrency"] != 4.0 {
		t.Fatalf("patch: null must clear the limit and other fields must stay: %v", patched)
	}

	var list struct {
		Queues []map[string]any `json:"queues"`
	}
	s.Must(http.StatusOK, "GET", "/queues", nil).JSON(t, &list)
	if len(list.Queues) != 1 || list.Queues[0]["name"] != "emails" {
		t.Fatalf("list: %v", list)
	}

	s.Must(http.StatusNoContent, "DELETE", "/queues/emails", nil)
	if code := s.Must(http.StatusNotFound, "GET", "/queues/emails", nil).ErrorCode(t); code != "queue_not_found" {
		t.Fatalf("deleted queue: code %q", code)
	}
	if code := s.Must(http.StatusNotFound, "DELETE", "/queues/emails", nil).ErrorCode(t); code != "queue_not_found" {
		t.Fatalf("delete missing: code %q", code)
	}
	if code := s.Must(http.StatusNotFound, "PATCH", "/queues/nope", map[string]any{"paused": true}).ErrorCode(t); code != "queue_not_found" {
		t.Fatalf("patch missing: code %q", code)
	}
	if code := s.Must(http.StatusNotFound, "GET", "/queues/nope/stats", nil).ErrorCode(t); code != "queue_not_found" {
		t.Fatalf("stats missing: code %q", code)
	}
}

func TestQueueRejectsBadInputAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"max_retries": 2})
	before := s.Must(http.StatusOK, "GET", "/queues/q", nil).Body

	cases := []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"missing name", "POST", "/queues", map[string]any{}, 400, "invalid_request"},
		{"bad name", "POST", "/queues", map[string]any{"name": "-bad"}, 400, "invalid_request"},
		{"name too long", "POST", "/queues", map[string]any{"name": strings.Repeat("a", 129)}, 400, "invalid_request"},
		{"name with slash", "POST", "/queues", map[string]any{"name": "a/b"}, 400, "invalid_request"},
		{"unknown field", "POST", "/queues", map[string]any{"name": "x", "colour": "red"}, 400, "invalid_request"},
		{"malformed", "POST", "/queues", `{"name": "x"`, 400, "invalid_request"},
		{"not an object", "POST", "/queues", `[1,2]`, 400, "invalid_request"},
		{"trailing data", "POST", "/queues", `{"name": "x"} {}`, 400, "invalid_request"},
		{"empty body", "POST", "/queues", ``, 400, "invalid_request"},
		{"wrong type", "POST", "/queues", map[string]any{"name": "x", "max_retries": "3"}, 400, "invalid_request"},
		{"retries too high", "POST", "/queues", map[string]any{"name": "x", "max_retries": 101}, 400, "invalid_request"},
		{"retries negative", "POST", "/queues", map[string]any{"name": "x", "max_retries": -1}, 400, "invalid_request"},
		{"rate zero", "POST", "/queues", map[string]any{"name": "x", "rate_limit": 0}, 400, "invalid_request"},
		{"burst zero", "POST", "/queues", map[string]any{"name": "x", "rate_burst": 0}, 400, "invalid_request"},
		{"concurrency zero", "POST", "/queues", map[string]any{"name": "x", "max_concurrency": 0}, 400, "invalid_request"},
		{"backoff max below base", "POST", "/queues", map[string]any{"name": "x", "backoff_base_ms": 5000, "backoff_max_ms": 10}, 400, "invalid_request"},
		{"patch name", "PATCH", "/queues/q", map[string]any{"name": "y"}, 400, "invalid_request"},
		{"patch null retries", "PATCH", "/queues/q", map[string]any{"max_retries": nil}, 400, "invalid_request"},
		{"patch bad burst", "PATCH", "/queues/q", map[string]any{"paused": true, "rate_burst": -4}, 400, "invalid_request"},
		{"patch malformed", "PATCH", "/queues/q", `{`, 400, "invalid_request"},
		{"retention too short", "POST", "/queues", map[string]any{"name": "x", "retention": map[string]any{"done_ms": 59999}}, 400, "invalid_request"},
		{"retention too long", "POST", "/queues", map[string]any{"name": "x", "retention": map[string]any{"dead_ms": 3153600000001}}, 400, "invalid_request"},
		{"retention unknown status", "POST", "/queues", map[string]any{"name": "x", "retention": map[string]any{"failed_ms": 60000}}, 400, "invalid_request"},
		{"retention not a number", "POST", "/queues", map[string]any{"name": "x", "retention": map[string]any{"done_ms": "7d"}}, 400, "invalid_request"},
		{"retention fraction", "POST", "/queues", map[string]any{"name": "x", "retention": map[string]any{"done_ms": 60000.5}}, 400, "invalid_request"},
		{"retention not an object", "POST", "/queues", map[string]any{"name": "x", "retention": 60000}, 400, "invalid_request"},
		{"patch retention negative", "PATCH", "/queues/q", map[string]any{"paused": true, "retention": map[string]any{"cancelled_ms": -1}}, 400, "invalid_request"},
		{"wrong method", "PUT", "/queues/q", map[string]any{}, 405, "method_not_allowed"},
		{"no route", "GET", "/nowhere", nil, 404, "not_found"},
	}
	for _, tc := range cases {
		resp := s.Do(tc.method, tc.path, tc.body)
		if resp.Status != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, resp.Status, tc.status, resp.Body)
			continue
		}
		if code := resp.ErrorCode(t); code != tc.code {
			t.Errorf("%s: code %q, want %q", tc.name, code, tc.code)
		}
	}
	after := s.Must(http.StatusOK, "GET", "/queues/q", nil).Body
	if string(before) != string(after) {
		t.Fatalf("bad requests changed the queue:\nbefore %s\nafter  %s", before, after)
	}
	var list struct {
		Queues []any `json:"queues"`
	}
	s.Must(http.StatusOK, "GET", "/queues", nil).JSON(t, &list)
	if len(list.Queues) != 1 {
		t.Fatalf("bad requests created queues: %d", len(list.Queues))
	}
}

// A queue's retention: ages left out follow serve's defaults (done and cancelled
// 7 days, dead forever), null keeps forever, a PATCH changes only the ages it gives,
// and null puts every age back to the default.
func TestQueueRetention(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	const week, hour = 7 * 24 * 3600 * 1000, 3600 * 1000
	retention := func(q map[string]any) [3]any {
		r, _ := q["retention"].(map[string]any)
		return [3]any{r["done_ms"], r["cancelled_ms"], r["dead_ms"]}
	}
	want := func(what string, q map[string]any, done, cancelled, dead any) {
		t.Helper()
		if got := retention(q); got != [3]any{done, cancelled, dead} {
			t.Fatalf("%s: retention %v, want [%v %v %v]", what, got, done, cancelled, dead)
		}
	}
	s.CreateQueue("plain", nil)
	want("created without retention", s.Must(http.StatusOK, "GET", "/queues/plain", nil).Map(t), float64(week), float64(week), nil)
	q := s.Must(http.StatusCreated, "POST", "/queues", map[string]any{
		"name": "short", "retention": map[string]any{"done_ms": hour, "dead_ms": 30 * 24 * hour},
	}).Map(t)
	want("created with retention", q, float64(hour), float64(week), float64(30*24*hour))
	want("read back", s.Must(http.StatusOK, "GET", "/queues/short", nil).Map(t), float64(hour), float64(week), float64(30*24*hour))

	q = s.Must(http.StatusOK, "PATCH", "/queues/short", map[string]any{"retention": map[string]any{"done_ms": nil, "cancelled_ms": 60000}}).Map(t)
	want("patched", q, nil, 60000.0, float64(30*24*hour))
	q = s.Must(http.StatusOK, "PATCH", "/queues/short", map[string]any{"max_retries": 1}).Map(t)
	want("patched another field", q, nil, 60000.0, float64(30*24*hour))
	var list struct {
		Queues []map[string]any `json:"queues"`
	}
	s.Must(http.StatusOK, "GET", "/queues", nil).JSON(t, &list)
	if len(list.Queues) != 2 {
		t.Fatalf("list: %v", list)
	}
	want("listed", list.Queues[1], nil, 60000.0, float64(30*24*hour))
	q = s.Must(http.StatusOK, "PATCH", "/queues/short", map[string]any{"retention": nil}).Map(t)
	want("reset", q, float64(week), float64(week), nil)
}

func TestDeleteQueueRefusedWhileItHoldsWork(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("busy", map[string]any{"max_retries": 0})
	task := s.Enqueue("busy", map[string]any{"payload": 1})
	if code := s.Must(http.StatusConflict, "DELETE", "/queues/busy", nil).ErrorCode(t); code != "queue_not_empty" {
		t.Fatalf("code %q", code)
	}
	// Run it to death: a dead task still blocks deletion.
	p := s.Poll("w", []string{"busy"}, 1, 5000)
	if len(p) != 1 {
		t.Fatalf("polled %d tasks", len(p))
	}
	s.Nack("w", p[0], "boom", map[string]any{"retryable": false})
	if code := s.Must(http.StatusConflict, "DELETE", "/queues/busy", nil).ErrorCode(t); code != "queue_not_empty" {
		t.Fatalf("dead task: code %q", code)
	}
	s.Must(http.StatusNoContent, "DELETE", "/queues/busy/dlq/"+task.ID, nil)
	s.Must(http.StatusNoContent, "DELETE", "/queues/busy", nil)
}
