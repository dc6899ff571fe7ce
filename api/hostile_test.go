package api_test

import (
	"bytes"
	"encoding/json"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/internal/testserver"
)

// TestHostileInput sends injection strings, deeply nested JSON, invalid UTF-8 and
// huge numbers in queue names, filters, cursors, headers and payloads. Each request
// gets a 4xx JSON error (and then nothing changed), or is stored verbatim.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	keep := s.Must(http.StatusCreated, "POST", "/queues/q/tasks", map[string]any{"payload": "keep"}).Map(t)["id"].(string)

	sqli := []string{`'; DROP TABLE tasks; --`, `" OR 1=1 --`, `q' OR '1'='1`, `$1`, `%27%20OR%201=1`}
	xss := []string{`<script>alert(1)</script>`, `"><img src=x onerror=alert(1)>`, "javascript:alert(1)"}
	nested := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	deepButValid := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)

	type tc struct {
		name         string
		method, path string
		body         any
		header       http.Header
	}
	var cases []tc
	for _, bad := range append(append(sqli, xss...), "", strings.Repeat("a", 129), "a\x00b", "../../etc/passwd", "\xff\xfe", "ｑ") {
		cases = append(cases,
			tc{"queue name " + bad, "POST", "/queues", map[string]any{"name": bad}, nil},
			tc{"queue path " + bad, "GET", "/queues/" + url.PathEscape(bad), nil, nil},
			tc{"enqueue path " + bad, "POST", "/queues/" + url.PathEscape(bad) + "/tasks", map[string]any{"payload": 1}, nil},
			tc{"status filter " + bad, "GET", "/queues/q/tasks?status=" + url.QueryEscape(bad), nil, nil},
			tc{"worker filter " + bad, "GET", "/queues/q/tasks?worker_id=" + url.QueryEscape(bad), nil, nil},
			tc{"created_after " + bad, "GET", "/queues/q/tasks?created_after=" + url.QueryEscape(bad), nil, nil},
			tc{"cursor " + bad, "GET", "/queues/q/tasks?cursor=" + url.QueryEscape(bad), nil, nil},
			tc{"dlq cursor " + bad, "GET", "/queues/q/dlq?cursor=" + url.QueryEscape(bad), nil, nil},
			tc{"task id " + bad, "GET", "/queues/q/tasks/" + url.PathEscape(bad), nil, nil},
			tc{"poll queue " + bad, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{bad}}, nil},
			tc{"worker id " + bad, "POST", "/workers/poll", map[string]any{"worker_id": bad, "queues": []string{"q"}}, nil},
			tc{"heartbeat worker " + bad, "POST", "/workers/heartbeat", map[string]any{"worker_id": bad}, nil},
			tc{"idempotency key " + bad, "POST", "/queues/q/tasks", map[string]any{"payload": 1, "idempotency_key": bad}, nil},
		)
	}
	for _, raw := range []string{
		`{"payload": ` + nested + `}`,
		`{"payload": ` + deepButValid + `}`,
		`{"payload": "\u0000"}`,
		`{"payload": {"\u0000": 1}}`,
		"{\"payload\": \"\xff\xfe\"}",
		"{\"payload\": {\"\xc3\x28\": 1}}",
		`{"payload": 1e400}`,
		`{"payload": 1e1000000}`,
		`{"payload": -1e1000000}`,
		`{"payload": 123456789012345678901234567890123456789012345678901234567890}`,
		`{"payload": 1, "priority": 1e30}`,
		`{"payload": 1, "priority": 99999999999999999999}`,
		`{"payload": 1, "max_retries": -99999999999999999999}`,
		`{"payload": 1, "timeout_seconds": 1.5}`,
		`{"payload": 1, "scheduled_at": "99999-01-01T00:00:00Z"}`,
		`{"payload": 1, "scheduled_at": "0000-01-01T00:00:00Z"}`,
		`{"payload": 1, "__proto__": {"admin": true}}`,
		`{"payload": 1, "payload": 2}`,
		`[]`, `null`, `"x"`, `{"payload": 1}{"payload": 2}`, `{"payload": `,
	} {
		cases = append(cases, tc{"enqueue body " + truncate(raw), "POST", "/queues/q/tasks", raw, nil})
		cases = append(cases, tc{"batch body " + truncate(raw), "POST", "/queues/q/tasks/batch", `{"tasks": [` + raw + `]}`, nil})
	}
	cases = append(cases,
		tc{"idempotency header invalid utf-8", "POST", "/queues/q/tasks", map[string]any{"payload": 1}, http.Header{"Idempotency-Key": {"\xff\xfe"}}},
		tc{"limit huge", "GET", "/queues/q/tasks?limit=99999999999999999999999", nil, nil},
		tc{"limit negative", "GET", "/queues/q/tasks?limit=-1", nil, nil},
		tc{"max_tasks huge", "POST", "/workers/poll", `{"worker_id": "w", "queues": ["q"], "max_tasks": 1e300}`, nil},
		tc{"wait_ms huge", "POST", "/workers/poll", `{"worker_id": "w", "queues": ["q"], "wait_ms": 99999999999999999999}`, nil},
		tc{"nack error NUL", "POST", "/workers/nack", `{"worker_id": "w", "task_id": "` + keep + `", "lease_token": "` + keep + `", "error": "\u0000"}`, nil},
		tc{"queue settings huge", "PATCH", "/queues/q", `{"rate_limit": 1e400}`, nil},
		tc{"queue settings NaN-ish", "PATCH", "/queues/q", `{"rate_limit": "NaN"}`, nil},
		tc{"queue rate tiny", "PATCH", "/queues/q", `{"rate_limit": 1e-300}`, nil}, // found by FuzzPopArguments: broke every poll
		tc{"queue backoff huge", "PATCH", "/queues/q", `{"backoff_max_ms": 9223372036854775808}`, nil},
		tc{"replay ids junk", "POST", "/queues/q/dlq/replay", `{"ids": ["' OR 1=1 --"]}`, nil},
	)

	for _, c := range cases {
		before := snapshotState(t, s)
		resp := testserver.Do(t, s.URL, c.method, c.path, c.body, c.header)
		switch {
		case resp.Status >= 500:
			t.Errorf("%s: status %d: %s", c.name, resp.Status, resp.Body)
		case resp.Status >= 400:
			if resp.Status != 404 || json.Valid(resp.Body) { // gin's 404 for a malformed path is still JSON here
				resp.ErrorCode(t)
			}
			if after := snapshotState(t, s); after != before {
				t.Errorf("%s: got %d but state changed:\nbefore %s\nafter  %s", c.name, resp.Status, truncate(before), truncate(after))
			}
		case resp.Status == 201 && strings.HasPrefix(c.path, "/queues/q/tasks") && !strings.HasSuffix(c.path, "batch"):
			// Stored verbatim: the payload reads back as sent (semantically).
			var sent struct{ Payload json.RawMessage }
			raw, _ := c.body.(string)
			if raw == "" {
				b, _ := json.Marshal(c.body)
				raw = string(b)
			}
			if json.Unmarshal([]byte(raw), &sent) != nil {
				t.Errorf("%s: accepted a body that does not parse", c.name)
				continue
			}
			var got struct{ Payload json.RawMessage }
			if err := json.Unmarshal(resp.Body, &got); err != nil {
				t.Errorf("%s: answer is not JSON: %v", c.name, err)
				continue
			}
			if !jsonEqual(t, sent.Payload, got.Payload) {
				t.Errorf("%s: payload %s stored as %s", c.name, truncate(string(sent.Payload)), truncate(string(got.Payload)))
			}
		}
	}
	// The table is intact, the untouched task still there, and q still serves polls
	// (a rate_limit of 1e-300, once accepted, made every poll of q fail).
	s.Must(http.StatusOK, "GET", "/queues/q/tasks/"+keep, nil)
	s.Must(http.StatusOK, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"q"}})
}

func truncate(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	var x, y any
	dx := json.NewDecoder(bytes.NewReader(a))
	dx.UseNumber()
	dy := json.NewDecoder(bytes.NewReader(b))
	dy.UseNumber()
	if dx.Decode(&x) != nil || dy.Decode(&y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb) || numericEqual(x, y)
}

// numericEqual compares JSON numbers by value (PostgreSQL may rewrite 1e400 as
// 1000…0).
func numericEqual(x, y any) bool {
	nx, ok1 := x.(json.Number)
	ny, ok2 := y.(json.Number)
	if !ok1 || !ok2 {
		return false
	}
	fx, ok1 := new(big.Float).SetPrec(4096).SetString(nx.String())
	fy, ok2 := new(big.Float).SetPrec(4096).SetString(ny.String())
	return ok1 && ok2 && fx.Cmp(fy) == 0
}

// snapshotState is a summary of everything a rejected request could change: the
// queues with their settings and the ids of queue q's tasks. (Statuses move on
// their own: the dispatcher buffers tasks and accepted polls claim them.)
func snapshotState(t *testing.T, s *testserver.Instance) string {
	t.Helper()
	qs := s.Must(http.StatusOK, "GET", "/queues", nil)
	var tasks struct {
		Tasks []struct {
			ID string `json:"id"`
		} `json:"tasks"`
	}
	s.Must(http.StatusOK, "GET", "/queues/q/tasks?limit=500", nil).JSON(t, &tasks)
	var b strings.Builder
	b.Write(qs.Body)
	for _, task := range tasks.Tasks {
		b.WriteString(task.ID + ";")
	}
	return b.String()
}
