package auth_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/internal/testserver"
)

// routeCase says how to call a route so that an allowed caller succeeds, and with
// what status.
type routeCase struct {
	// rule is what the route must require, stated here independently of
	// auth/policy.go so that a wrong policy fails the test.
	rule auth.Rule
	want int
	// build returns a fresh request (method set by the test); it may create fixtures.
	build func(f fixtures) request
}

// restrictedOutcome is what a token restricted to another queue gets from routes
// whose handler checks the queues named in the body or the stored object
// (workflows span queues): a submission is refused, a workflow of other queues is
// not found, the list leaves it out.
var restrictedOutcome = map[string]int{
	"POST /workflows":       403,
	"GET /workflows/:id":    404,
	"DELETE /workflows/:id": 404,
}

// The rules the matrix expects.
var (
	pub        = auth.Rule{Role: auth.Public}
	admin      = auth.Rule{Role: auth.RoleAdmin}
	adminQ     = auth.Rule{Role: auth.RoleAdmin, Queue: true}
	adminPage  = auth.Rule{Role: auth.RoleAdmin, Page: true}
	producer   = auth.Rule{Role: auth.RoleProducer}
	producerQ  = auth.Rule{Role: auth.RoleProducer, Queue: true}
	worker     = auth.Rule{Role: auth.RoleWorker}
	workerPoll = auth.Rule{Role: auth.RoleWorker, PollBody: true}
)

func get(path string) func(fixtures) request {
	return func(fixtures) request { return request{path: path} }
}

func post(path string, body any) func(fixtures) request {
	return func(fixtures) request { return request{path: path, body: body} }
}

// matrixCases covers every route of the engine. A route added without a case here
// fails TestAuthorizationMatrix.
var matrixCases = map[string]routeCase{
	"GET /healthz": {pub, 200, get("/healthz")},
	"GET /readyz":  {pub, 200, get("/readyz")},
	"GET /metrics": {admin, 200, get("/metrics")},

	"GET /openapi.json": {pub, 200, get("/openapi.json")},

	"POST /queues":              {admin, 201, func(fixtures) request { return request{path: "/queues", body: map[string]any{"name": uniq("new")}} }},
	"GET /queues":               {producer, 200, get("/queues")},
	"GET /queues/:name":         {producerQ, 200, get("/queues/mq")},
	"PATCH /queues/:name":       {adminQ, 200, post("/queues/pq", map[string]any{"max_retries": 3})},
	"POST /queues/:name/pause":  {adminQ, 200, get("/queues/pq/pause")},
	"POST /queues/:name/resume": {adminQ, 200, get("/queues/pq/resume")},
	"DELETE /queues/:name": {adminQ, 204, func(f fixtures) request {
		name := uniq("doomed")
		f.queue(name, nil)
		return request{path: "/queues/" + name}
	}},
	"GET /queues/:name/stats":  {producerQ, 200, get("/queues/mq/stats")},
	"GET /queues/:name/groups": {producerQ, 200, get("/queues/mq/groups?active=true")},
	"GET /queues/:name/groups/:group": {producerQ, 200, func(f fixtures) request {
		return request{path: "/queues/mq/groups/" + f.group("mq")}
	}},
	"PUT /queues/:name/groups/:group": {adminQ, 200, post("/queues/pq/groups/g1", map[string]any{"max_concurrency": 2})},
	"DELETE /queues/:name/groups/:group": {adminQ, 204, func(f fixtures) request {
		return request{path: "/queues/pq/groups/" + f.group("pq")}
	}},
	"POST /queues/:name/tasks":       {producerQ, 201, post("/queues/mq/tasks", map[string]any{"payload": map[string]any{"k": 1}})},
	"POST /queues/:name/tasks/batch": {producerQ, 201, post("/queues/mq/tasks/batch", map[string]any{"tasks": []any{map[string]any{"payload": 1}}})},
	"GET /queues/:name/tasks":        {producerQ, 200, get("/queues/mq/tasks?limit=5")},
	"GET /queues/:name/tasks/:id": {producerQ, 200, func(f fixtures) request {
		return request{path: "/queues/mq/tasks/" + f.task("mq")}
	}},
	"DELETE /queues/:name/tasks/:id": {producerQ, 200, func(f fixtures) request {
		return request{path: "/queues/mq/tasks/" + f.task("mq")}
	}},
	"GET /queues/:name/dlq": {adminQ, 200, get("/queues/dq/dlq")},
	"POST /queues/:name/dlq/replay": {adminQ, 200, func(f fixtures) request {
		return request{path: "/queues/dq/dlq/replay", body: map[string]any{"ids": []string{f.dead("dq")}}}
	}},
	"POST /queues/:name/dlq/:id/replay": {adminQ, 201, func(f fixtures) request {
		return request{path: "/queues/dq/dlq/" + f.dead("dq") + "/replay"}
	}},
	"DELETE /queues/:name/dlq/:id": {adminQ, 204, func(f fixtures) request {
		return request{path: "/queues/dq/dlq/" + f.dead("dq")}
	}},
	"DELETE /queues/:name/dlq": {adminQ, 200, func(f fixtures) request {
		return request{path: "/queues/dq/dlq", body: map[string]any{"ids": []string{f.dead("dq")}}}
	}},
	"POST /queues/:name/tasks/cancel": {producerQ, 200, func(f fixtures) request {
		return request{path: "/queues/mq/tasks/cancel", body: map[string]any{"ids": []string{f.task("mq")}}}
	}},

	"POST /workers/poll":      {workerPoll, 200, post("/workers/poll", map[string]any{"worker_id": "m", "queues": []string{"eq"}})},
	"POST /workers/heartbeat": {worker, 200, post("/workers/heartbeat", map[string]any{"worker_id": "m"})},
	"POST /workers/ack": {worker, 200, func(f fixtures) request {
		id, lease := f.lease("lq")
		return request{path: "/workers/ack", body: map[string]any{"worker_id": "fixture", "task_id": id, "lease_token": lease}}
	}},
	"POST /workers/ack/batch": {worker, 200, func(f fixtures) request {
		id, lease := f.lease("lq")
		return request{path: "/workers/ack/batch", body: map[string]any{"worker_id": "fixture",
			"acks": []any{map[string]any{"task_id": id, "lease_token": lease}}}}
	}},
	"POST /workers/heartbeat/batch": {worker, 200, func(f fixtures) request {
		id, lease := f.lease("lq")
		return request{path: "/workers/heartbeat/batch", body: map[string]any{"worker_id": "fixture",
			"leases": []any{map[string]any{"task_id": id, "lease_token": lease}}}}
	}},
	"POST /workers/nack": {worker, 200, func(f fixtures) request {
		id, lease := f.lease("lq")
		return request{path: "/workers/nack", body: map[string]any{"worker_id": "fixture", "task_id": id, "lease_token": lease, "error": "x"}}
	}},
	"POST /workers/release": {worker, 200, func(f fixtures) request {
		id, lease := f.lease("lq")
		return request{path: "/workers/release", body: map[string]any{"worker_id": "fixture", "task_id": id, "lease_token": lease}}
	}},
	"GET /workers": {admin, 200, get("/workers")},
	"GET /history": {admin, 200, get("/history")},

	"POST /workflows": {producer, 201, post("/workflows", map[string]any{"steps": []any{
		map[string]any{"step": "a", "queue": "mq", "payload": 1}}})},
	"GET /workflows": {producer, 200, get("/workflows")},
	"GET /workflows/:id": {producer, 200, func(f fixtures) request {
		return request{path: "/workflows/" + f.workflow("mq")}
	}},
	"DELETE /workflows/:id": {producer, 200, func(f fixtures) request {
		return request{path: "/workflows/" + f.workflow("mq")}
	}},
	"GET /audit": {admin, 200, get("/audit")},

	"POST /schedules": {admin, 201, func(fixtures) request {
		return request{path: "/schedules", body: map[string]any{"name": uniq("new"), "queue": "mq", "cron": "@daily", "payload": 1}}
	}},
	"GET /schedules":       {admin, 200, get("/schedules")},
	"GET /schedules/:name": {admin, 200, func(f fixtures) request { return request{path: "/schedules/" + f.schedule()} }},
	"PATCH /schedules/:name": {admin, 200, func(f fixtures) request {
		return request{path: "/schedules/" + f.schedule(), body: map[string]any{"priority": 2}}
	}},
	"DELETE /schedules/:name":       {admin, 204, func(f fixtures) request { return request{path: "/schedules/" + f.schedule()} }},
	"POST /schedules/:name/trigger": {admin, 201, func(f fixtures) request { return request{path: "/schedules/" + f.schedule() + "/trigger"} }},

	"POST /tokens": {admin, 201, post("/tokens", map[string]any{"role": "producer", "name": "matrix"})},
	"GET /tokens":  {admin, 200, get("/tokens")},
	"DELETE /tokens/:id": {admin, 204, func(f fixtures) request {
		_, id := mint(f.t.(*testing.T), f.in, auth.Spec{Role: auth.RoleWorker})
		return request{path: "/tokens/" + id}
	}},

	"GET /admin":                         {pub, 301, get("/admin")},
	"GET /admin/":                        {adminPage, 200, get("/admin/")},
	"GET /admin/assets/*path":            {pub, 200, get("/admin/assets/app.css")},
	"GET /admin/events":                  {admin, 200, func(fixtures) request { return request{path: "/admin/events", stream: true} }},
	"GET /admin/api/queues/:name/dlq":    {adminQ, 200, get("/admin/api/queues/dq/dlq")},
	"GET /admin/api/queues/:name/groups": {adminQ, 200, get("/admin/api/queues/dq/groups")},
	"GET /admin/login":                   {pub, 200, get("/admin/login")},
	"POST /admin/session": {pub, 303, func(f fixtures) request {
		return request{path: "/admin/session", body: url.Values{"token": {f.admin}}.Encode(), contentType: "application/x-www-form-urlencoded"}
	}},
	"POST /admin/logout": {pub, 303, get("/admin/logout")},
}

// TestAuthorizationMatrix calls every route of the engine as every kind of caller
// and checks 401 for bad credentials, 403 for the wrong role or queue, and the
// route's success status otherwise.
func TestAuthorizationMatrix(t *testing.T) {
	t.Parallel()
	in := start(t, nil)
	adminTok, _ := mint(t, in, auth.Spec{Role: auth.RoleAdmin, Name: "admin"})
	producerTok, _ := mint(t, in, auth.Spec{Role: auth.RoleProducer})
	workerTok, _ := mint(t, in, auth.Spec{Role: auth.RoleWorker})
	producerOther, _ := mint(t, in, auth.Spec{Role: auth.RoleProducer, Queues: []string{"other"}})
	workerOther, _ := mint(t, in, auth.Spec{Role: auth.RoleWorker, Queues: []string{"other"}})
	expired, _ := mint(t, in, auth.Spec{Role: auth.RoleAdmin, TTL: time.Millisecond})
	revoked, revokedID := mint(t, in, auth.Spec{Role: auth.RoleAdmin})
	if _, err := in.Server.Store.RevokeToken(context.Background(), uuid.MustParse(revokedID), false); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 5*time.Second, "the expired token to expire", func() bool {
		ts, err := in.Server.Store.ListTokens(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range ts {
			if tok.ExpiresAt != nil && time.Now().After(tok.ExpiresAt.Add(time.Millisecond)) {
				return true
			}
		}
		return false
	})

	f := fixtures{t: t, in: in, admin: adminTok}
	for _, q := range []string{"mq", "pq", "eq", "lq", "other"} {
		f.queue(q, nil)
	}
	f.queue("dq", map[string]any{"max_retries": 0})

	type caller struct {
		name  string
		token func(auth.Rule) string
		// outcome: 0 = allowed, else the status expected.
		outcome func(auth.Rule) int
	}
	denyAll := func(r auth.Rule) int {
		switch {
		case r.Role == auth.Public:
			return 0
		case r.Page:
			return 0 // checked below: a page redirects anonymous callers
		}
		return 401
	}
	byRole := func(role auth.Role) func(auth.Rule) int {
		return func(r auth.Rule) int {
			if r.Role == auth.Public || r.Role == role || role == auth.RoleAdmin {
				return 0
			}
			return 403
		}
	}
	callers := []caller{
		{"none", func(auth.Rule) string { return "" }, denyAll},
		{"expired", func(auth.Rule) string { return expired }, func(r auth.Rule) int {
			if r.Role == auth.Public {
				return 0
			}
			return 401
		}},
		{"revoked", func(auth.Rule) string { return revoked }, func(r auth.Rule) int {
			if r.Role == auth.Public {
				return 0
			}
			return 401
		}},
		{"malformed", func(auth.Rule) string { return "tf_short" }, func(r auth.Rule) int {
			if r.Role == auth.Public {
				return 0
			}
			return 401
		}},
		{"producer", func(auth.Rule) string { return producerTok }, byRole(auth.RoleProducer)},
		{"worker", func(auth.Rule) string { return workerTok }, byRole(auth.RoleWorker)},
		{"admin", func(auth.Rule) string { return adminTok }, byRole(auth.RoleAdmin)},
		// A token of the route's own role, restricted to queue "other", which no
		// case uses: refused where the route names a queue.
		{"restricted", func(r auth.Rule) string {
			if r.Role == auth.RoleWorker {
				return workerOther
			}
			return producerOther
		}, func(r auth.Rule) int {
			switch {
			case r.Role == auth.Public:
				return 0
			case r.Role == auth.RoleAdmin, r.Queue, r.PollBody:
				return 403
			}
			return 0
		}},
	}

	routes := in.Server.API.Engine().Routes()
	if len(routes) < len(matrixCases) {
		t.Errorf("engine has %d routes, matrix %d cases: remove stale cases", len(routes), len(matrixCases))
	}
	for _, rt := range routes {
		key := rt.Method + " " + rt.Path
		rc, ok := matrixCases[key]
		if !ok {
			t.Errorf("route %s has no case in the authorization matrix: add one", key)
			continue
		}
		if _, ok := auth.RuleFor(rt.Method, rt.Path); !ok {
			t.Errorf("route %s has no rule in auth/policy.go: add one", key)
		}
		rule := rc.rule
		for _, c := range callers {
			req := rc.build(f)
			req.method = rt.Method
			req.token = c.token(rule)
			if key == "POST /admin/session" { // the token travels in the form
				req.token = ""
			}
			resp := send(t, in, req)
			want := c.outcome(rule)
			if out, ok := restrictedOutcome[key]; ok && c.name == "restricted" {
				want = out
			}
			if c.name == "none" && rule.Page {
				want = http.StatusSeeOther
			}
			what := fmt.Sprintf("%s as %s", key, c.name)
			switch {
			case want == 0 && resp.Status != rc.want:
				t.Errorf("%s: status %d, want %d: %s", what, resp.Status, rc.want, resp.Body)
			case want != 0 && resp.Status != want:
				t.Errorf("%s: status %d, want %d: %s", what, resp.Status, want, resp.Body)
			case want == 401 || want == 403:
				code := map[int]string{401: auth.CodeUnauthorized, 403: auth.CodeForbidden}[want]
				if got := resp.ErrorCode(t); got != code {
					t.Errorf("%s: error code %q, want %q", what, got, code)
				}
			}
		}
	}
}
