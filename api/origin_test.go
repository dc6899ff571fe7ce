package api_test

import (
	"net/http"
	"testing"

	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

// A web page on another site cannot drive an operator's browser into changing
// anything; reads, same-origin pages and non-browser clients are unaffected.
func TestCrossSiteStateChangesAreRefused(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) {
		c.TrustedOrigins = []string{"https://ops.example.com"}
	}})
	s.CreateQueue("q", nil)
	for _, tc := range []struct {
		name, method, path string
		header             map[string]string
		want               int
	}{
		{"cross-site GET", "GET", "/queues/q", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, 200},
		{"cross-site POST", "POST", "/queues/q/pause", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, 403},
		{"same-site DELETE", "DELETE", "/queues/q", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://other.local"}, 403},
		{"old browser, foreign Origin", "PATCH", "/queues/q", map[string]string{"Origin": "https://evil.example"}, 403},
		{"trusted origin", "POST", "/queues/q/resume", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://ops.example.com"}, 200},
		{"same-origin page", "POST", "/queues/q/resume", map[string]string{"Sec-Fetch-Site": "same-origin"}, 200},
		{"no browser headers (SDK, curl)", "POST", "/queues/q/resume", nil, 200},
	} {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		var body any
		if tc.method == "PATCH" {
			body = map[string]any{"paused": true}
		}
		resp := testserver.Do(t, s.URL, tc.method, tc.path, body, h)
		if resp.Status != tc.want {
			t.Errorf("%s: %d, want %d: %s", tc.name, resp.Status, tc.want, resp.Body)
			continue
		}
		if tc.want == 403 && resp.ErrorCode(t) != "cross_origin_request" {
			t.Errorf("%s: code %s", tc.name, resp.Body)
		}
	}
	if q := s.Must(200, "GET", "/queues/q", nil).Map(t); q["paused"] != false {
		t.Fatalf("a refused request changed the queue: %v", q)
	}
}
