package main

import (
	"testing"

	"github.com/taskforge/taskforge/client"
)

// TestCLIGroups: task enqueue --group; group set, get, list and delete; a group
// with nothing exits as not found.
func TestCLIGroups(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.s.CreateQueue("q", map[string]any{"fairness": "round_robin", "paused": true})

	var task client.Task
	e.json(&task, "task", "enqueue", "q", "--payload", "1", "--group", "acme")
	if task.Group == nil || *task.Group != "acme" {
		t.Fatalf("enqueued: %+v", task)
	}
	r := e.want(0, "group", "set", "q", "acme", "--weight", "3", "--max-concurrency", "2")
	contains(t, "set output", r.stdout, "weight:", "3 (override)", "max_concurrency:", "2 (override)", "pending:", "1")
	var g client.Group
	e.json(&g, "group", "get", "q", "acme")
	if *g.Weight != 3 || g.Pending != 1 {
		t.Fatalf("get: %+v", g)
	}
	r = e.want(0, "group", "list", "q", "--active")
	contains(t, "list output", r.stdout, "GROUP", "acme")
	e.want(0, "group", "delete", "q", "acme")
	e.json(&g, "group", "get", "q", "acme")
	if g.Weight != nil {
		t.Fatalf("after delete: %+v", g)
	}
	e.want(exitNotFound, "group", "get", "q", "nobody")
	e.want(exitUsage, "group", "set", "q", "acme", "--weight", "0") // the server's 400
}
