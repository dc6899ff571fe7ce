package auth_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

// TestOpenUntilFirstToken: with no token the API is open (as before tokens); the
// first token switches authentication on within the cache period.
func TestOpenUntilFirstToken(t *testing.T) {
	t.Parallel()
	in, clock := startClocked(t, nil)
	must(t, in, 201, request{method: "POST", path: "/queues", body: map[string]any{"name": "a"}})
	must(t, in, 200, request{method: "GET", path: "/queues", token: "tf_not-a-real-token"}) // ignored while open
	admin, _ := mint(t, in, auth.Spec{Role: auth.RoleAdmin})
	must(t, in, 201, request{method: "POST", path: "/queues", body: map[string]any{"name": "b"}}) // the cache says open
	clock.Advance(cacheAge)
	resp := send(t, in, request{method: "GET", path: "/queues"})
	if code := resp.ErrorCode(t); code != auth.CodeUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("anonymous: code %q, WWW-Authenticate %q", code, resp.Header.Get("WWW-Authenticate"))
	}
	must(t, in, 200, request{method: "GET", path: "/queues", token: admin})
	must(t, in, 200, request{method: "GET", path: "/healthz"})
	must(t, in, 200, request{method: "GET", path: "/readyz"})
}

// TestTokenEndpoints: POST /tokens shows the secret once; GET /tokens never shows
// secrets or hashes; revoking works, and the last admin token cannot be revoked
// over HTTP.
func TestTokenEndpoints(t *testing.T) {
	t.Parallel()
	in, clock := startClocked(t, nil)
	admin, adminID := mint(t, in, auth.Spec{Role: auth.RoleAdmin})
	var created struct {
		ID     string   `json:"id"`
		Token  string   `json:"token"`
		Role   string   `json:"role"`
		Queues []string `json:"queues"`
	}
	must(t, in, 201, request{method: "POST", path: "/tokens", token: admin,
		body: map[string]any{"role": "producer", "queues": []string{"a", "b"}, "expires_in_seconds": 3600, "name": "ci"}}).JSON(t, &created)
	if !strings.HasPrefix(created.Token, auth.TokenPrefix) || len(created.Token) != 46 || created.Role != "producer" || len(created.Queues) != 2 {
		t.Fatalf("created %+v", created)
	}
	list := must(t, in, 200, request{method: "GET", path: "/tokens", token: admin})
	if strings.Contains(string(list.Body), created.Token) || strings.Contains(string(list.Body), "hash") {
		t.Fatalf("token list leaks a secret: %s", list.Body)
	}
	// Works at once on this replica.
	must(t, in, 200, request{method: "GET", path: "/queues", token: created.Token})

	for _, bad := range []map[string]any{
		{"role": "root"},
		{"role": "admin", "queues": []string{"a"}},
		{"role": "producer", "queues": []string{"bad name"}},
		{"role": "producer", "expires_in_seconds": 0},
		{"role": "producer", "rate_limit": -1},
		{"role": "producer", "extra": 1},
	} {
		if r := send(t, in, request{method: "POST", path: "/tokens", token: admin, body: bad}); r.Status != 400 {
			t.Errorf("POST /tokens %v: status %d, want 400: %s", bad, r.Status, r.Body)
		}
	}

	must(t, in, 204, request{method: "DELETE", path: "/tokens/" + created.ID, token: admin})
	clock.Advance(cacheAge)
	must(t, in, 401, request{method: "GET", path: "/queues", token: created.Token})
	must(t, in, 404, request{method: "DELETE", path: "/tokens/00000000-0000-0000-0000-000000000000", token: admin})
	must(t, in, 404, request{method: "DELETE", path: "/tokens/not-a-uuid", token: admin})
	r := must(t, in, 409, request{method: "DELETE", path: "/tokens/" + adminID, token: admin})
	if code := r.ErrorCode(t); code != "last_admin_token" {
		t.Fatalf("code %q", code)
	}
	must(t, in, 200, request{method: "GET", path: "/queues", token: admin})
}

// TestRevocationReachesEveryReplica: a token revoked through one replica is refused
// by another once its cache period (1 s) has passed, and not before; a token
// created on one replica works on the other at once.
func TestRevocationReachesEveryReplica(t *testing.T) {
	t.Parallel()
	a := start(t, nil)
	var clock testenv.Clock // b's
	clock.Set(time.Now())
	b := testserver.Start(t, testserver.Options{DatabaseURL: a.Config.DatabaseURL, RedisPrefix: a.Config.RedisPrefix,
		Configure: func(c *server.Config) { c.NoMigrate = true; c.Auth.Now = clock.Now }})
	admin, _ := mint(t, a, auth.Spec{Role: auth.RoleAdmin})
	must(t, b, 200, request{method: "GET", path: "/workers", token: admin}) // b loads its cache
	var created struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	must(t, a, 201, request{method: "POST", path: "/tokens", token: admin, body: map[string]any{"role": "admin"}}).JSON(t, &created)
	must(t, b, 200, request{method: "GET", path: "/workers", token: created.Token}) // a miss reloads b's cache

	must(t, a, 204, request{method: "DELETE", path: "/tokens/" + created.ID, token: admin})
	must(t, b, 200, request{method: "GET", path: "/workers", token: created.Token}) // b's cache is not yet stale
	clock.Advance(cacheAge - time.Millisecond)
	must(t, b, 200, request{method: "GET", path: "/workers", token: created.Token})
	clock.Advance(time.Millisecond)
	must(t, b, 401, request{method: "GET", path: "/workers", token: created.Token})
}

// TestRestrictedTokens: a queue-restricted producer sees and uses only its queues;
// a restricted worker may poll only its queues.
func TestRestrictedTokens(t *testing.T) {
	t.Parallel()
	in := start(t, nil)
	admin, _ := mint(t, in, auth.Spec{Role: auth.RoleAdmin})
	f := fixtures{t: t, in: in, admin: admin}
	f.queue("mine", nil)
	f.queue("theirs", nil)
	prod, _ := mint(t, in, auth.Spec{Role: auth.RoleProducer, Queues: []string{"mine"}})
	work, _ := mint(t, in, auth.Spec{Role: auth.RoleWorker, Queues: []string{"mine"}})

	var qs struct {
		Queues []struct{ Name string } `json:"queues"`
	}
	must(t, in, 200, request{method: "GET", path: "/queues", token: prod}).JSON(t, &qs)
	if len(qs.Queues) != 1 || qs.Queues[0].Name != "mine" {
		t.Fatalf("restricted producer sees %+v, want only mine", qs.Queues)
	}
	must(t, in, 201, request{method: "POST", path: "/queues/mine/tasks", token: prod, body: map[string]any{"payload": 1}})
	must(t, in, 403, request{method: "POST", path: "/queues/theirs/tasks", token: prod, body: map[string]any{"payload": 1}})
	must(t, in, 403, request{method: "GET", path: "/queues/theirs/tasks", token: prod})

	poll := func(queues ...string) testserver.Response {
		return send(t, in, request{method: "POST", path: "/workers/poll", token: work,
			body: map[string]any{"worker_id": "w", "queues": queues}})
	}
	if r := poll("mine"); r.Status != 200 {
		t.Fatalf("poll mine: %d %s", r.Status, r.Body)
	}
	for _, qs := range [][]string{{"theirs"}, {"mine", "theirs"}} {
		if r := poll(qs...); r.Status != 403 {
			t.Fatalf("poll %v: %d %s", qs, r.Status, r.Body)
		}
	}
	// Case and duplicate-key tricks decode as the handler decodes them.
	for _, raw := range []string{
		`{"worker_id": "w", "queues": ["mine"], "QUEUES": ["theirs"]}`,
		`{"worker_id": "w", "Queues": ["theirs"]}`,
	} {
		r := send(t, in, request{method: "POST", path: "/workers/poll", token: work, body: raw})
		if r.Status != 403 && r.Status != 400 {
			t.Fatalf("poll %s: %d %s", raw, r.Status, r.Body)
		}
	}
	// A poll made larger than the middleware reads by its acks is still refused a
	// queue the token may not use, before its acks are committed or anything is
	// claimed; a large poll without acks is refused outright.
	waiting := must(t, in, 201, request{method: "POST", path: "/queues/theirs/tasks", token: admin, body: map[string]any{"payload": 1}})
	var theirs struct{ ID string }
	waiting.JSON(t, &theirs)
	big := strings.Repeat("x", 70<<10)
	ack := map[string]any{"task_id": "00000000-0000-4000-8000-000000000001", "lease_token": "00000000-0000-4000-8000-000000000002", "result": big}
	if r := send(t, in, request{method: "POST", path: "/workers/poll", token: work,
		body: map[string]any{"worker_id": "w", "queues": []string{"theirs"}, "acks": []any{ack}}}); r.Status != 403 {
		t.Fatalf("large poll of theirs with acks: %d %.200s", r.Status, r.Body)
	}
	padded := `{"worker_id": "w", "queues": ["theirs"]` + strings.Repeat(" ", 70<<10) + `}`
	if r := send(t, in, request{method: "POST", path: "/workers/poll", token: work, body: padded}); r.Status != 413 && r.Status != 403 {
		t.Fatalf("padded poll of theirs: %d %.200s", r.Status, r.Body)
	}
	// Padding would also slip a long poll past the middleware's per-worker bound.
	padded = `{"worker_id": "w", "queues": ["mine"], "wait_ms": 1000` + strings.Repeat(" ", 70<<10) + `}`
	if r := send(t, in, request{method: "POST", path: "/workers/poll", token: work, body: padded}); r.Status != 413 {
		t.Fatalf("padded poll of mine: %d %.200s", r.Status, r.Body)
	}
	var task struct{ Status string }
	must(t, in, 200, request{method: "GET", path: "/queues/theirs/tasks/" + theirs.ID, token: admin}).JSON(t, &task)
	if task.Status == "executing" {
		t.Fatal("a restricted worker claimed a task of a queue it may not poll")
	}
	if r := send(t, in, request{method: "POST", path: "/workers/poll", token: work,
		body: map[string]any{"worker_id": "w", "queues": []string{"mine"}, "acks": []any{ack}}}); r.Status != 200 {
		t.Fatalf("large poll of mine with acks: %d %.200s", r.Status, r.Body)
	}

	// Nothing else in theirs was touched.
	var out struct{ Depth map[string]int }
	must(t, in, 200, request{method: "GET", path: "/queues/theirs/stats", token: admin}).JSON(t, &out)
	for status, n := range out.Depth {
		if n != 0 && status != "pending" && status != "claimed" {
			t.Fatalf("theirs has %d %s tasks", n, status)
		}
	}
}

// TestExpiredTokenRefused: a token past its expiry gets 401 although it is cached.
func TestExpiredTokenRefused(t *testing.T) {
	t.Parallel()
	var clock testenv.Clock
	clock.Set(time.Now())
	in := start(t, func(c *server.Config) { c.Auth.Now = clock.Now })
	tok, _ := mint(t, in, auth.Spec{Role: auth.RoleAdmin, TTL: time.Hour})
	_, _ = mint(t, in, auth.Spec{Role: auth.RoleAdmin})
	must(t, in, 200, request{method: "GET", path: "/queues", token: tok})
	clock.Set(time.Now().Add(time.Hour + time.Minute))
	must(t, in, 401, request{method: "GET", path: "/queues", token: tok})
}

// TestFloodRateLimit: one token hammering the API gets 429 with Retry-After once
// its burst is spent, and its rate's worth more once the clock moves on, while
// another token's requests keep succeeding. The guard runs on a test clock, so
// the figures are exact: no request's timing decides them.
func TestFloodRateLimit(t *testing.T) {
	t.Parallel()
	var clock testenv.Clock
	clock.Set(time.Now())
	in := start(t, func(c *server.Config) { c.Auth.RateLimit = 50; c.Auth.RateBurst = 50; c.Auth.Now = clock.Now })
	flooder, _ := mint(t, in, auth.Spec{Role: auth.RoleProducer})
	calm, _ := mint(t, in, auth.Spec{Role: auth.RoleProducer})
	_, _ = mint(t, in, auth.Spec{Role: auth.RoleAdmin})

	// flood sends n requests as the flooder from 8 goroutines at once.
	flood := func(n int) (ok, limited, other int64, retryAfter string) {
		var okN, limitedN, otherN atomic.Int64
		var ra atomic.Value
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					r := send(t, in, request{method: "GET", path: "/queues", token: flooder})
					switch r.Status {
					case 200:
						okN.Add(1)
					case 429:
						limitedN.Add(1)
						ra.Store(r.Header.Get("Retry-After"))
					default:
						otherN.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		retryAfter, _ = ra.Load().(string)
		return okN.Load(), limitedN.Load(), otherN.Load(), retryAfter
	}
	for round, elapsed := range []time.Duration{0, time.Second} {
		clock.Advance(elapsed)
		ok, limited, other, ra := flood(120)
		t.Logf("round %d: flooder %d ok, %d rate-limited, %d other", round, ok, limited, other)
		// The burst at first; then a second's worth at 50/s, capped by the burst.
		if ok != 50 || limited != 70 || other != 0 {
			t.Fatalf("round %d: flooder got %d ok, %d 429, %d other; want 50, 70, 0", round, ok, limited, other)
		}
		if n, err := strconv.Atoi(ra); err != nil || n < 1 {
			t.Fatalf("round %d: 429 with Retry-After %q", round, ra)
		}
		for i := range 20 {
			if r := send(t, in, request{method: "GET", path: "/queues", token: calm}); r.Status != 200 {
				t.Fatalf("round %d: calm token's request %d: %d %s", round, i, r.Status, r.Body)
			}
		}
	}
	must(t, in, 200, request{method: "GET", path: "/healthz"})
}

// TestLongPollsPerWorkerBounded: one worker id may hold at most MaxPollsPerWorker
// long polls on a replica; others are unaffected, and slots free up when polls end.
func TestLongPollsPerWorkerBounded(t *testing.T) {
	t.Parallel()
	in := start(t, func(c *server.Config) { c.Auth.MaxPollsPerWorker = 2 })
	must(t, in, 201, request{method: "POST", path: "/queues", body: map[string]any{"name": "idle"}})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Two long polls of "greedy" that park (each retries while a probe below holds a
	// slot); probes run one at a time, so when one is refused both are parked.
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				body := strings.NewReader(`{"worker_id": "greedy", "queues": ["idle"], "wait_ms": 30000}`)
				req, _ := http.NewRequestWithContext(ctx, "POST", in.URL+"/workers/poll", body)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	third := request{method: "POST", path: "/workers/poll", body: map[string]any{"worker_id": "greedy", "queues": []string{"idle"}, "wait_ms": 50}}
	testserver.Eventually(t, 5*time.Second, "a third long poll of greedy refused", func() bool {
		r := send(t, in, third)
		return r.Status == 429 && r.ErrorCode(t) == auth.CodeRateLimited && r.Header.Get("Retry-After") != ""
	})
	must(t, in, 200, request{method: "POST", path: "/workers/poll", body: map[string]any{"worker_id": "modest", "queues": []string{"idle"}, "wait_ms": 50}})
	must(t, in, 200, request{method: "POST", path: "/workers/poll", body: map[string]any{"worker_id": "greedy", "queues": []string{"idle"}}}) // short polls are not bounded
	cancel()
	wg.Wait()
	testserver.Eventually(t, 5*time.Second, "greedy's slots freed", func() bool { return send(t, in, third).Status == 200 })
}

// TestDashboardSession: an admin token signs in to a session cookie that is
// HttpOnly, SameSite=Strict and not the token; it grants the dashboard and the API,
// ends at sign-out and when the token is revoked.
func TestDashboardSession(t *testing.T) {
	t.Parallel()
	in, clock := startClocked(t, nil)
	admin, adminID := mint(t, in, auth.Spec{Role: auth.RoleAdmin})
	_, _ = mint(t, in, auth.Spec{Role: auth.RoleAdmin}) // so adminID may be revoked over HTTP
	producer, _ := mint(t, in, auth.Spec{Role: auth.RoleProducer})

	r := must(t, in, 303, request{method: "GET", path: "/admin/"})
	if loc := r.Header.Get("Location"); loc != "/admin/login" {
		t.Fatalf("anonymous dashboard redirects to %q", loc)
	}
	page := must(t, in, 200, request{method: "GET", path: "/admin/login"})
	if page.Header.Get("Content-Security-Policy") == "" || !strings.Contains(string(page.Body), `action="/admin/session"`) {
		t.Fatalf("sign-in page: headers %v body %s", page.Header, page.Body)
	}
	form := func(tok string) request {
		return request{method: "POST", path: "/admin/session", body: url.Values{"token": {tok}}.Encode(),
			contentType: "application/x-www-form-urlencoded"}
	}
	for _, bad := range []string{producer, "tf_nonsense", ""} {
		if r := send(t, in, form(bad)); r.Status != 401 || len(r.Header.Values("Set-Cookie")) != 0 {
			t.Fatalf("sign-in with %q: %d, cookies %v", bad, r.Status, r.Header.Values("Set-Cookie"))
		}
	}
	// A cross-site sign-in (login CSRF) is refused by the cross-origin guard.
	cross := form(admin)
	resp := sendWithHeader(t, in, cross, "Sec-Fetch-Site", "cross-site")
	if resp.Status != 403 {
		t.Fatalf("cross-site sign-in: %d", resp.Status)
	}

	r = must(t, in, 303, form(admin))
	cookies := (&http.Response{Header: r.Header}).Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies %v", r.Header.Values("Set-Cookie"))
	}
	ck := cookies[0]
	if ck.Name != auth.SessionCookie || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" ||
		ck.Value == admin || strings.Contains(ck.Value, admin) || ck.MaxAge <= 0 {
		t.Fatalf("session cookie %+v", ck)
	}
	must(t, in, 200, request{method: "GET", path: "/admin/", cookie: ck.Value})
	must(t, in, 200, request{method: "GET", path: "/admin/events", cookie: ck.Value, stream: true})
	must(t, in, 201, request{method: "POST", path: "/queues", cookie: ck.Value, body: map[string]any{"name": "viaSession"}})
	must(t, in, 401, request{method: "GET", path: "/queues", cookie: "tfs_forged"})

	// Sign-out ends this session server-side.
	must(t, in, 303, request{method: "POST", path: "/admin/logout", cookie: ck.Value})
	must(t, in, 401, request{method: "GET", path: "/queues", cookie: ck.Value})

	// Revoking the token ends its sessions.
	r = must(t, in, 303, form(admin))
	second := (&http.Response{Header: r.Header}).Cookies()[0].Value
	must(t, in, 200, request{method: "GET", path: "/queues", cookie: second})
	other, _ := mint(t, in, auth.Spec{Role: auth.RoleAdmin})
	clock.Advance(cacheAge) // the cache knows other
	must(t, in, 204, request{method: "DELETE", path: "/tokens/" + adminID, token: other})
	clock.Advance(cacheAge)
	must(t, in, 401, request{method: "GET", path: "/queues", cookie: second})
}

func sendWithHeader(t *testing.T, in *testserver.Instance, r request, key, value string) testserver.Response {
	t.Helper()
	req, err := http.NewRequest(r.method, in.URL+r.path, strings.NewReader(r.body.(string)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", r.contentType)
	req.Header.Set(key, value)
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return testserver.Response{Status: resp.StatusCode, Header: resp.Header}
}
