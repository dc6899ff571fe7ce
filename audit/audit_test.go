package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/storage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// page is one answer of GET /audit.
type page struct {
	Entries    []storage.AuditEntry `json:"entries"`
	NextCursor *string              `json:"next_cursor"`
}

// caller sends requests to a replica with a token (none when empty).
type caller struct {
	t     *testing.T
	in    *testserver.Instance
	token string
}

func (c caller) do(method, path string, body any, header ...string) testserver.Response {
	c.t.Helper()
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return testserver.Do(c.t, c.in.URL, method, path, body, h)
}

func (c caller) must(want int, method, path string, body any) testserver.Response {
	c.t.Helper()
	resp := c.do(method, path, body)
	if resp.Status != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.Status, resp.Body, want)
	}
	return resp
}

func mint(t *testing.T, in *testserver.Instance, spec auth.Spec) (string, storage.Token) {
	t.Helper()
	secret, tok, err := auth.Create(context.Background(), in.Server.Store, spec)
	if err != nil {
		t.Fatal(err)
	}
	return secret, tok
}

// TestAuditRecordsOperatorActions: the operator actions of authorized callers are
// recorded with their token, address, request and outcome, refusals included;
// data-plane calls (enqueue, poll) and requests the auth middleware turned away are
// not; a minted token's secret never reaches the log; GET /audit pages newest
// first, filters by queue, and refuses bad parameters and non-admins.
func TestAuditRecordsOperatorActions(t *testing.T) {
	t.Parallel()
	in := testserver.Start(t, testserver.Options{})
	adminSecret, adminTok := mint(t, in, auth.Spec{Role: auth.RoleAdmin, Name: "alice-oncall"})
	producerSecret, _ := mint(t, in, auth.Spec{Role: auth.RoleProducer, Name: "deploy-bot"})
	workerSecret, _ := mint(t, in, auth.Spec{Role: auth.RoleWorker, Name: "fleet"})
	admin, producer, worker := caller{t, in, adminSecret}, caller{t, in, producerSecret}, caller{t, in, workerSecret}
	anonymous := caller{t, in, ""}
	testserver.Eventually(t, 5*time.Second, "the tokens loaded", func() bool { return admin.do("GET", "/queues", nil).Status == 200 })

	admin.must(201, "POST", "/queues", map[string]any{"name": "emails"})
	admin.must(200, "PATCH", "/queues/emails", map[string]any{"rate_limit": 5})
	admin.must(400, "PATCH", "/queues/emails", map[string]any{"max_retries": 500})
	admin.must(200, "POST", "/queues/emails/pause", nil)
	var task struct {
		ID string `json:"id"`
	}
	producer.must(201, "POST", "/queues/emails/tasks", map[string]any{"payload": "hi"}).JSON(t, &task) // not audited
	producer.must(200, "DELETE", "/queues/emails/tasks/"+task.ID, nil)
	worker.must(200, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"emails"}}) // not audited
	producer.must(403, "POST", "/queues", map[string]any{"name": "nope"})                                     // turned away: not recorded
	anonymous.must(401, "PATCH", "/queues/emails", map[string]any{"paused": false})                           // turned away: not recorded
	var minted struct {
		Secret string `json:"token"`
	}
	admin.must(201, "POST", "/tokens", map[string]any{"role": "worker", "name": "batch-workers"}).JSON(t, &minted)
	if minted.Secret == "" {
		t.Fatal("POST /tokens returned no secret")
	}

	var got page
	admin.must(200, "GET", "/audit", nil).JSON(t, &got)
	want := []string{ // newest first
		"alice-oncall POST /tokens 201",
		"deploy-bot DELETE /queues/:name/tasks/:id 200",
		"alice-oncall POST /queues/:name/pause 200",
		"alice-oncall PATCH /queues/:name 400",
		"alice-oncall PATCH /queues/:name 200",
		"alice-oncall POST /queues 201",
	}
	var seen []string
	for _, e := range got.Entries {
		seen = append(seen, fmt.Sprintf("%s %s %s %d", e.Actor, e.Method, e.Route, e.Status))
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") || got.NextCursor != nil {
		t.Fatalf("audit log:\n%s\nwant:\n%s (next cursor %v)", strings.Join(seen, "\n"), strings.Join(want, "\n"), got.NextCursor)
	}
	patch, cancel := got.Entries[4], got.Entries[1]
	if patch.Via != "token" || patch.TokenID == nil || *patch.TokenID != adminTok.ID || patch.RemoteAddr != "127.0.0.1" ||
		patch.Queue == nil || *patch.Queue != "emails" || patch.Target != nil || string(patch.Request) != `{"rate_limit":5}` {
		t.Errorf("PATCH entry: %+v (request %s)", patch, patch.Request)
	}
	if cancel.Target == nil || *cancel.Target != task.ID || string(cancel.Request) != "null" {
		t.Errorf("cancel entry: %+v", cancel)
	}
	if refused := got.Entries[3]; string(refused.Request) != `{"max_retries":500}` {
		t.Errorf("refused PATCH request %s", refused.Request)
	}
	var leaks int
	if err := in.Server.Store.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM audit_log WHERE request::text LIKE '%' || $1 || '%'`, minted.Secret).Scan(&leaks); err != nil {
		t.Fatal(err)
	}
	if leaks != 0 {
		t.Errorf("the minted token's secret is in %d audit entries", leaks)
	}

	// Pages of two, for one queue, newest first, without overlap.
	var first, second page
	admin.must(200, "GET", "/audit?queue=emails&limit=2", nil).JSON(t, &first)
	if len(first.Entries) != 2 || first.NextCursor == nil || first.Entries[0].ID != got.Entries[1].ID {
		t.Fatalf("first page: %+v", first)
	}
	admin.must(200, "GET", "/audit?queue=emails&limit=2&cursor="+*first.NextCursor, nil).JSON(t, &second)
	if len(second.Entries) != 2 || second.Entries[0].ID != got.Entries[3].ID || second.Entries[1].ID >= second.Entries[0].ID {
		t.Fatalf("second page: %+v", second)
	}

	for _, q := range []string{"limit=0", "limit=501", "limit=x", "cursor=0", "cursor=abc", "queue=" + strings.Repeat("q", 201)} {
		if resp := admin.do("GET", "/audit?"+q, nil); resp.Status != 400 || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("GET /audit?%.20s: %d %s", q, resp.Status, resp.Body)
		}
	}
	producer.must(403, "GET", "/audit", nil)
}

// TestAuditOnAnOpenAPI: with no token, entries name no token; the forwarded-for
// header is kept apart from the peer address; a body over 4 KiB is summarised.
func TestAuditOnAnOpenAPI(t *testing.T) {
	t.Parallel()
	in := testserver.Start(t, testserver.Options{})
	open := caller{t, in, ""}
	if resp := open.do("POST", "/queues", map[string]any{"name": "reports"}, "X-Forwarded-For", "203.0.113.7"); resp.Status != 201 {
		t.Fatalf("create queue: %d %s", resp.Status, resp.Body)
	}
	big := map[string]any{"name": strings.Repeat("x", 5000)}
	open.must(400, "POST", "/queues", big)

	var got page
	open.must(200, "GET", "/audit", nil).JSON(t, &got)
	if len(got.Entries) != 2 {
		t.Fatalf("entries: %+v", got.Entries)
	}
	tooBig, created := got.Entries[0], got.Entries[1]
	if created.Actor != "anonymous" || created.Via != "open" || created.TokenID != nil ||
		created.RemoteAddr != "127.0.0.1 (X-Forwarded-For: 203.0.113.7)" || created.Status != 201 {
		t.Errorf("entry on an open API: %+v", created)
	}
	var summary map[string]int
	if err := json.Unmarshal(tooBig.Request, &summary); err != nil || summary["omitted_bytes"] <= 4096 || tooBig.Status != 400 {
		t.Errorf("a 5 KB request was kept as %s (status %d)", tooBig.Request, tooBig.Status)
	}
}

// TestEveryAdminChangeIsAudited: every route that changes state and needs an admin
// is audited, so a route added later cannot slip out of the log unnoticed.
func TestEveryAdminChangeIsAudited(t *testing.T) {
	t.Parallel()
	in := testserver.Start(t, testserver.Options{})
	audited := 0
	for _, rt := range in.Server.API.Engine().Routes() {
		rule, _ := auth.RuleFor(rt.Method, rt.Path)
		if rule.Audit {
			audited++
		}
		if rt.Method != http.MethodGet && rt.Method != http.MethodHead && rule.Role == auth.RoleAdmin && !rule.Audit {
			t.Errorf("%s %s changes state as an admin but is not audited", rt.Method, rt.Path)
		}
	}
	if audited < 11 {
		t.Errorf("%d audited routes, want at least 11", audited)
	}
}
