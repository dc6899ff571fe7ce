package api_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

func TestPushFieldSetShownAndCleared(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	created := s.Must(http.StatusCreated, "POST", "/queues", map[string]any{"name": "hooks",
		"push": map[string]any{"url": "https://example.com/hook", "headers": map[string]string{"x-api-key": "k"}, "secret": "s1"}}).Map(t)
	p, _ := created["push"].(map[string]any)
	if p == nil || p["url"] != "https://example.com/hook" || p["timeout_ms"] != 30000.0 || p["secret_set"] != true ||
		p["headers"].(map[string]any)["X-Api-Key"] != "k" || p["secret"] != nil {
		t.Fatalf("created push %v, want url, default timeout_ms, canonical headers, secret_set and no secret", created["push"])
	}
	// A new target without secret keeps the secret; secret null drops it.
	patched := s.Must(http.StatusOK, "PATCH", "/queues/hooks", map[string]any{
		"push": map[string]any{"url": "http://example.com/v2", "timeout_ms": 5000}}).Map(t)
	p = patched["push"].(map[string]any)
	if p["url"] != "http://example.com/v2" || p["timeout_ms"] != 5000.0 || p["secret_set"] != true || len(p["headers"].(map[string]any)) != 0 {
		t.Fatalf("patched push %v", p)
	}
	p = s.Must(http.StatusOK, "PATCH", "/queues/hooks", map[string]any{
		"push": map[string]any{"url": "http://example.com/v2", "secret": nil}}).Map(t)["push"].(map[string]any)
	if p["secret_set"] != false {
		t.Fatalf("secret null: push %v, want secret_set false", p)
	}
	// Other settings leave the target alone; push null makes it a pull queue.
	if got := s.Must(http.StatusOK, "PATCH", "/queues/hooks", map[string]any{"max_retries": 1}).Map(t); got["push"] == nil {
		t.Fatalf("a PATCH without push dropped the target: %v", got)
	}
	if got := s.Must(http.StatusOK, "PATCH", "/queues/hooks", map[string]any{"push": nil}).Map(t); got["push"] != nil {
		t.Fatalf("push null: %v, want a pull queue", got)
	}
	if got := s.Must(http.StatusCreated, "POST", "/queues", map[string]any{"name": "pull"}).Map(t); got["push"] != nil {
		t.Fatalf("a new queue is a pull queue by default: %v", got)
	}
}

func TestPushFieldRejectsBadConfigsAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.Must(http.StatusCreated, "POST", "/queues", map[string]any{"name": "q", "push": map[string]any{"url": "https://ok.example/"}})
	before := string(s.Must(http.StatusOK, "GET", "/queues/q", nil).Body)
	for name, push := range map[string]any{
		"no url":           map[string]any{"timeout_ms": 10},
		"ftp":              map[string]any{"url": "ftp://example.com/x"},
		"relative":         map[string]any{"url": "/hook"},
		"no host":          map[string]any{"url": "http:///hook"},
		"credentials":      map[string]any{"url": "https://u:p@example.com/"},
		"timeout 0":        map[string]any{"url": "https://example.com/", "timeout_ms": 0},
		"timeout too long": map[string]any{"url": "https://example.com/", "timeout_ms": 600001},
		"bad header name":  map[string]any{"url": "https://example.com/", "headers": map[string]string{"bad name": "v"}},
		"header newline":   map[string]any{"url": "https://example.com/", "headers": map[string]string{"X-A": "v\r\nX-B: w"}},
		"reserved header":  map[string]any{"url": "https://example.com/", "headers": map[string]string{"TaskForge-Signature": "x"}},
		"content-type":     map[string]any{"url": "https://example.com/", "headers": map[string]string{"content-type": "text/plain"}},
		"empty secret":     map[string]any{"url": "https://example.com/", "secret": ""},
		"unknown field":    map[string]any{"url": "https://example.com/", "method": "PUT"},
		"not an object":    "https://example.com/",
	} {
		resp := s.Do("PATCH", "/queues/q", map[string]any{"push": push, "max_retries": 9})
		if resp.Status != http.StatusBadRequest || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("%s: status %d %s, want 400 invalid_request", name, resp.Status, resp.Body)
		}
		resp = s.Do("POST", "/queues", map[string]any{"name": "new", "push": push})
		if resp.Status != http.StatusBadRequest {
			t.Errorf("%s: create got %d, want 400", name, resp.Status)
		}
	}
	if after := string(s.Must(http.StatusOK, "GET", "/queues/q", nil).Body); after != before {
		t.Fatalf("rejected changes changed the queue:\n%s\n%s", before, after)
	}
	s.Must(http.StatusNotFound, "GET", "/queues/new", nil)
}

func TestPollOfPushQueueIs400(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("pull", nil)
	s.CreateQueue("pushed", map[string]any{"push": map[string]any{"url": "http://127.0.0.1:1/"}})
	resp := s.Do("POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"pull", "pushed"}})
	if resp.Status != http.StatusBadRequest || resp.ErrorCode(t) != "invalid_request" || !strings.Contains(string(resp.Body), "pushed") {
		t.Fatalf("poll naming a push queue: %d %s, want 400 naming it", resp.Status, resp.Body)
	}
	s.Must(http.StatusOK, "PATCH", "/queues/pushed", map[string]any{"push": nil})
	s.Must(http.StatusOK, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"pull", "pushed"}})
}

func TestPushSecretIsSealedAtRest(t *testing.T) {
	t.Parallel()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) {
		c.EncryptionKeys = "k1=" + base64.StdEncoding.EncodeToString(key)
	}})
	s.CreateQueue("sealed", map[string]any{"push": map[string]any{"url": "http://127.0.0.1:1/", "secret": "plain-secret"}})
	var stored string
	if err := s.Server.Store.Pool().QueryRow(context.Background(), "SELECT push_secret FROM queues WHERE name = 'sealed'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, "plain-secret") || !strings.Contains(stored, "taskforge_sealed") {
		t.Fatalf("stored secret %q, want it sealed", stored)
	}
	// A PATCH that keeps the secret leaves it sealed once, and readable.
	s.Must(http.StatusOK, "PATCH", "/queues/sealed", map[string]any{"push": map[string]any{"url": "http://127.0.0.1:2/"}})
	qs, err := s.Server.Store.PushQueues(context.Background())
	if err != nil || len(qs) != 1 || qs[0].PushSecret == nil || *qs[0].PushSecret != "plain-secret" {
		t.Fatalf("push queues %+v (%v), want the secret opened", qs, err)
	}
	// Rotation: a secret stored in clear (before encryption was on) is sealed, once.
	if _, err := s.Server.Store.Pool().Exec(context.Background(), "UPDATE queues SET push_secret = 'old-clear' WHERE name = 'sealed'"); err != nil {
		t.Fatal(err)
	}
	for pass, want := range []int{1, 0} {
		if n, err := s.Server.Store.ResealPushSecrets(context.Background()); err != nil || n != want {
			t.Fatalf("reseal pass %d changed %d secrets (%v), want %d", pass+1, n, err, want)
		}
	}
	if qs, err := s.Server.Store.PushQueues(context.Background()); err != nil || *qs[0].PushSecret != "old-clear" {
		t.Fatalf("after the reseal: %+v (%v)", qs, err)
	}
}
