package auth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

// start runs a replica; configure may adjust its config.
func start(t *testing.T, configure func(*server.Config)) *testserver.Instance {
	t.Helper()
	return testserver.Start(t, testserver.Options{Configure: configure})
}

// startClocked starts a replica whose guard runs on the returned clock, set to now:
// a test moves it past the token cache's age (auth.Config.CacheTTL, 1 s) instead
// of waiting for the cache to expire.
func startClocked(t *testing.T, configure func(*server.Config)) (*testserver.Instance, *testenv.Clock) {
	t.Helper()
	clock := &testenv.Clock{}
	clock.Set(time.Now())
	return start(t, func(c *server.Config) {
		c.Auth.Now = clock.Now
		if configure != nil {
			configure(c)
		}
	}), clock
}

// cacheAge is how far a test moves the guard's clock for its token cache to be
// reloaded: the default CacheTTL.
const cacheAge = time.Second

// mint creates a token directly in the replica's database and returns its secret.
func mint(t *testing.T, in *testserver.Instance, spec auth.Spec) (string, string) {
	t.Helper()
	secret, tok, err := auth.Create(context.Background(), in.Server.Store, spec)
	if err != nil {
		t.Fatalf("create token %+v: %v", spec, err)
	}
	return secret, tok.ID.String()
}

// request is one HTTP request of a test.
type request struct {
	method, path string
	body         any    // JSON-encoded unless a string (sent raw)
	contentType  string // defaults to application/json when there is a body
	token        string // Bearer token; empty = none
	cookie       string // session cookie value; empty = none
	stream       bool   // the answer is a stream: read the status only
}

// send performs r against in without following redirects.
func send(t testing.TB, in *testserver.Instance, r request) testserver.Response {
	t.Helper()
	var body io.Reader
	switch b := r.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(enc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.method, in.URL+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if r.body != nil {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.cookie != "" {
		req.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: r.cookie})
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	if r.stream && resp.StatusCode == http.StatusOK {
		return testserver.Response{Status: resp.StatusCode, Header: resp.Header}
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", r.method, r.path, err)
	}
	return testserver.Response{Status: resp.StatusCode, Body: data, Header: resp.Header}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// must sends r and fails unless the status is want.
func must(t testing.TB, in *testserver.Instance, want int, r request) testserver.Response {
	t.Helper()
	resp := send(t, in, r)
	if resp.Status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", r.method, r.path, resp.Status, want, resp.Body)
	}
	return resp
}

var seq atomic.Int64

// uniq returns a fresh name with prefix.
func uniq(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }

// fixtures creates queues, tasks, leases and dead tasks through the API with an
// admin token.
type fixtures struct {
	t     testing.TB
	in    *testserver.Instance
	admin string
}

func (f fixtures) queue(name string, settings map[string]any) {
	f.t.Helper()
	body := map[string]any{"name": name}
	for k, v := range settings {
		body[k] = v
	}
	must(f.t, f.in, 201, request{method: "POST", path: "/queues", body: body, token: f.admin})
}

func (f fixtures) task(queue string) string {
	f.t.Helper()
	var out struct{ ID string }
	must(f.t, f.in, 201, request{method: "POST", path: "/queues/" + queue + "/tasks", body: map[string]any{"payload": 1}, token: f.admin}).JSON(f.t, &out)
	return out.ID
}

// group gives a fresh group of queue overrides and returns its name.
func (f fixtures) group(queue string) string {
	f.t.Helper()
	name := uniq("grp")
	must(f.t, f.in, 200, request{method: "PUT", path: "/queues/" + queue + "/groups/" + name, token: f.admin,
		body: map[string]any{"weight": 2}})
	return name
}

// workflow submits a one-step workflow into queue and returns its id.
func (f fixtures) workflow(queue string) string {
	f.t.Helper()
	var out struct{ ID string }
	must(f.t, f.in, 201, request{method: "POST", path: "/workflows", token: f.admin,
		body: map[string]any{"steps": []any{map[string]any{"step": "a", "queue": queue, "payload": 1}}}}).JSON(f.t, &out)
	return out.ID
}

// lease enqueues a task in queue and polls it as worker "fixture": its id and
// lease token.
func (f fixtures) lease(queue string) (string, string) {
	f.t.Helper()
	f.task(queue)
	var out struct {
		Tasks []testserver.Polled `json:"tasks"`
	}
	must(f.t, f.in, 200, request{method: "POST", path: "/workers/poll", token: f.admin,
		body: map[string]any{"worker_id": "fixture", "queues": []string{queue}, "wait_ms": 10000}}).JSON(f.t, &out)
	if len(out.Tasks) != 1 {
		f.t.Fatalf("poll of %s got %d tasks, want 1", queue, len(out.Tasks))
	}
	return out.Tasks[0].ID, out.Tasks[0].LeaseToken
}

// schedule creates an hourly schedule on queue mq and returns its name.
func (f fixtures) schedule() string {
	f.t.Helper()
	name := uniq("sched")
	must(f.t, f.in, 201, request{method: "POST", path: "/schedules", token: f.admin,
		body: map[string]any{"name": name, "queue": "mq", "cron": "@hourly", "payload": 1}})
	return name
}

// dead makes a dead task in queue and returns its id.
func (f fixtures) dead(queue string) string {
	f.t.Helper()
	id, lease := f.lease(queue)
	must(f.t, f.in, 200, request{method: "POST", path: "/workers/nack", token: f.admin,
		body: map[string]any{"worker_id": "fixture", "task_id": id, "lease_token": lease, "error": "boom", "retryable": false}})
	return id
}
