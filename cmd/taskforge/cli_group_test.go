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
	e.json(&task, "task", "enqueue", "q", "--payload", "2", "--group", "beta")
	var page struct{ Tasks []client.Task }
	e.json(&page, "task", "list", "q", "--group", "beta")
	if len(page.Tasks) != 1 || page.Tasks[0].ID != task.ID {
		t.Fatalf("task list --group beta: %+v", page.Tasks)
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

// TestCLIQueueFairness: queue create and update set and clear fairness and the
// groups' default limits; bad values exit as usage errors naming the flag.
func TestCLIQueueFairness(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	var q client.Queue
	e.json(&q, "queue", "create", "fair", "--fairness", "round_robin", "--group-max-concurrency", "2",
		"--group-rate-limit", "0.5", "--group-rate-burst", "3")
	if q.Fairness == nil || *q.Fairness != "round_robin" || q.GroupMaxConcurrency == nil || *q.GroupMaxConcurrency != 2 ||
		q.GroupRateLimit == nil || *q.GroupRateLimit != 0.5 || q.GroupRateBurst == nil || *q.GroupRateBurst != 3 {
		t.Fatalf("queue create with fairness: %+v", q)
	}
	r := e.want(0, "queue", "get", "fair")
	contains(t, "get output", r.stdout, "fairness:", "round_robin", "group_limits:", "max_concurrency 2, rate_limit 0.5, rate_burst 3")

	// Only the flags given change; none clears.
	e.json(&q, "queue", "update", "fair", "--group-max-concurrency", "none", "--group-rate-limit", "4")
	if q.Fairness == nil || q.GroupMaxConcurrency != nil || q.GroupRateLimit == nil || *q.GroupRateLimit != 4 || *q.GroupRateBurst != 3 {
		t.Fatalf("queue update --group-max-concurrency none: %+v", q)
	}
	e.json(&q, "queue", "update", "fair", "--fairness", "none", "--group-rate-limit", "none", "--group-rate-burst", "default")
	if q.Fairness != nil || q.GroupRateLimit != nil || q.GroupRateBurst != nil {
		t.Fatalf("queue update --fairness none: %+v", q)
	}
	r = e.want(0, "queue", "get", "fair")
	contains(t, "get output after clearing", r.stdout, "fairness:         -", "group_limits:     -")

	for _, bad := range [][]string{
		{"--fairness", "weighted"},
		{"--group-max-concurrency", "0"},
		{"--group-max-concurrency", "many"},
		{"--group-rate-limit", "-1"},
		{"--group-rate-limit", "NaN"},
		{"--group-rate-burst", "0"},
		{"--group-rate-burst", "1.5"},
	} {
		r = e.want(exitUsage, append([]string{"queue", "update", "fair"}, bad...)...)
		contains(t, "stderr of "+bad[0]+" "+bad[1], r.stderr, bad[0]+" ", "want ")
	}
	r = e.want(exitUsage, "queue", "create", "x", "--group-max-concurrency", "2000000") // the server's 400
	contains(t, "stderr", r.stderr, "group_max_concurrency must be")
	e.want(exitNotFound, "queue", "get", "x")
}
