package main

import (
	"testing"

	"github.com/taskforge/taskforge/client"
)

func TestCLIQueuePushFlags(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	r := e.want(0, "queue", "create", "hooks", "--push-url", "https://example.com/hook", "--push-timeout", "5s",
		"--push-header", "Authorization=Bearer abc", "--push-secret", "s3cret")
	contains(t, "queue create", r.stdout, "https://example.com/hook (timeout 5s, 1 headers, signed)")
	var q client.Queue
	e.json(&q, "queue", "get", "hooks")
	if q.Push == nil || q.Push.TimeoutMs != 5000 || q.Push.Headers["Authorization"] != "Bearer abc" || !q.Push.SecretSet {
		t.Fatalf("queue %+v, want the push target the flags gave", q.Push)
	}
	e.want(exitUsage, "queue", "update", "hooks", "--push-timeout", "1s")                     // no --push-url
	e.want(exitUsage, "queue", "update", "hooks", "--pull", "--push-url", "http://x.example") // both
	e.want(exitUsage, "queue", "update", "hooks", "--push-url", "http://x.example", "--push-header", "novalue")
	e.want(exitUsage, "queue", "update", "hooks", "--push-url", "ftp://x.example") // the server says 400
	e.json(&q, "queue", "update", "hooks", "--push-url", "http://x.example/v2")
	if q.Push == nil || q.Push.URL != "http://x.example/v2" || !q.Push.SecretSet || q.Push.TimeoutMs != 30000 {
		t.Fatalf("after a new URL: %+v, want the secret kept and the default timeout", q.Push)
	}
	e.json(&q, "queue", "update", "hooks", "--pull")
	if q.Push != nil {
		t.Fatalf("--pull left %+v", q.Push)
	}
}
