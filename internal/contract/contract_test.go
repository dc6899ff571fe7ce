package contract_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/taskforge/taskforge/internal/contract"
)

// recordingTB keeps the failures Check reports instead of failing the test.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestCheck shows the rule: responses are always held to the document, requests
// only when the answer is a success, and a route the document lacks must be
// answered as the router answers unknown routes.
func TestCheck(t *testing.T) {
	queue := `{"name":"q","max_retries":3,"rate_limit":null,"rate_burst":null,"max_concurrency":null,` +
		`"backoff_base_ms":1000,"backoff_max_ms":3600000,"paused":false,"priority_aging_ms":null,"push":null,` +
		`"retention":{"done_ms":604800000,"cancelled_ms":null,"dead_ms":null},"idempotency_window_ms":86400000,` +
		`"fairness":null,"group_max_concurrency":null,"group_rate_limit":null,"group_rate_burst":null,` +
		`"created_at":"2026-12-01T00:00:00Z","updated_at":"2026-12-01T00:00:00Z"}`
	badRequest := `{"error":{"code":"invalid_request","message":"bad"}}`
	cases := []struct {
		name, method, path, body string
		status                   int
		answer                   string
		fails                    string // "" when the exchange keeps the contract
	}{
		{"a success as documented", "POST", "/queues", `{"name":"q"}`, 201, queue, ""},
		{"a success to a request the document refuses", "POST", "/queues", `{"name":"q","colour":"red"}`, 201, queue, "request"},
		{"a refusal of a bad request", "POST", "/queues", `{"name":"q","colour":"red"}`, 400, badRequest, ""},
		{"a response with a field the document lacks", "GET", "/healthz", "", 200, `{"status":"ok","uptime":1}`, "response"},
		{"an error with a code the document gives another status", "GET", "/queues/q", "", 404, `{"error":{"code":"lease_lost","message":"x"}}`, "response"},
		{"a status the operation does not list", "GET", "/healthz", "", 418, badRequest, "status is not supported"},
		{"an unknown route answered by the router", "GET", "/nowhere", "", 404, `{"error":{"code":"not_found","message":"no such route"}}`, ""},
		{"an undocumented route that answers", "GET", "/nowhere", "", 200, `{}`, "no operation in the document"},
		{"a poll whose tasks are part prefetch", "POST", "/workers/poll", `{"worker_id":"w","queues":["q"],"max_tasks":4,"prefetch_tasks":2}`, 200, `{"tasks":[]}`, ""},
		{"a catch-all route", "GET", "/admin/assets/js/api.js", "", 200, "x", ""},
		{"a path that differs from another by its trailing slash", "GET", "/admin/", "", 200, "<html>", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingTB{TB: t}
			h := contract.Check(rec, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = r.Body.Read(make([]byte, 1)) // a handler that reads only part of the body
				ct := "application/json; charset=utf-8"
				if strings.HasPrefix(r.URL.Path, "/admin/") {
					ct = "text/html; charset=utf-8"
				}
				w.Header().Set("Content-Type", ct)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.answer))
			}))
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			switch {
			case tc.fails == "" && len(rec.errors) > 0:
				t.Errorf("reported %q", rec.errors)
			case tc.fails != "" && (len(rec.errors) != 1 || !strings.Contains(rec.errors[0], tc.fails)):
				t.Errorf("reported %q, want one failure mentioning %q", rec.errors, tc.fails)
			}
		})
	}
}

// TestLoad checks that the document is valid OpenAPI 3.1.
func TestLoad(t *testing.T) {
	if _, err := contract.Load(); err != nil {
		t.Fatal(err)
	}
}
