package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

// TestWorkflowUnblockSurvivesCrashAfterAck: replica A dies (crash point
// after-ack-commit: exit right after the ack's commit, before it answers or does
// anything else) while acking the parent of a two-step workflow. The child's
// unblocking committed with the ack, so replica B, whose dispatcher does not LISTEN
// (only its tick and sweep can find the child), still hands the child to a worker.
func TestWorkflowUnblockSurvivesCrashAfterAck(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t)
	env := []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + testenv.RedisAddr(t),
		"TASKFORGE_REDIS_PREFIX=" + testenv.RedisPrefix(t),
		"TASKFORGE_DISPATCH_INTERVAL=100ms",
		"TASKFORGE_LOG_LEVEL=warn",
	}
	b := startReplica(t, append(env, "TASKFORGE_LISTEN_DATABASE_URL=off"))
	a := startReplica(t, append(env, "TASKFORGE_CRASHPOINTS=after-ack-commit=1"))
	if resp := testserver.Do(t, b.URL, "POST", "/queues", map[string]any{"name": "q"}, nil); resp.Status != 201 {
		t.Fatalf("create queue: %d %s", resp.Status, resp.Body)
	}
	resp := testserver.Do(t, b.URL, "POST", "/workflows", map[string]any{"steps": []any{
		map[string]any{"step": "parent", "queue": "q", "payload": 1},
		map[string]any{"step": "child", "queue": "q", "payload": 2, "depends_on": []string{"parent"}},
	}}, nil)
	if resp.Status != 201 {
		t.Fatalf("submit: %d %s", resp.Status, resp.Body)
	}
	var wf struct{ ID string }
	resp.JSON(t, &wf)

	poll := func(base string) []testserver.Polled {
		var out struct{ Tasks []testserver.Polled }
		testserver.Do(t, base, "POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"q"},
			"wait_ms": 2000}, nil).JSON(t, &out)
		return out.Tasks
	}
	var parent []testserver.Polled
	testserver.Eventually(t, 20*time.Second, "parent polled from A", func() bool {
		parent = poll(a.URL)
		return len(parent) == 1
	})
	if parent[0].Step == nil || *parent[0].Step != "parent" {
		t.Fatalf("polled %+v, want the parent", parent[0])
	}
	body, _ := json.Marshal(map[string]any{"worker_id": "w", "task_id": parent[0].ID, "lease_token": parent[0].LeaseToken})
	ackResp, err := http.Post(a.URL+"/workers/ack", "application/json", bytes.NewReader(body))
	if err == nil {
		ackResp.Body.Close()
		t.Fatalf("replica A answered the ack (%d) instead of crashing after its commit", ackResp.StatusCode)
	}
	if err := a.cmd.Wait(); err == nil || a.cmd.ProcessState.ExitCode() != 77 {
		t.Fatalf("replica A: %v, want the crash point's exit status 77", err)
	}

	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var parentStatus, childStatus string
	if err := conn.QueryRow(context.Background(), `SELECT
		(SELECT status FROM all_tasks WHERE workflow_id = $1 AND step = 'parent'),
		(SELECT status FROM all_tasks WHERE workflow_id = $1 AND step = 'child')`, wf.ID).Scan(&parentStatus, &childStatus); err != nil {
		t.Fatal(err)
	}
	if parentStatus != "done" || childStatus == "blocked" {
		t.Fatalf("after the crash: parent %s, child %s; the ack and the unblocking commit together", parentStatus, childStatus)
	}
	var child []testserver.Polled
	testserver.Eventually(t, 30*time.Second, "child polled from B", func() bool {
		child = poll(b.URL)
		return len(child) == 1
	})
	if *child[0].Step != "child" {
		t.Fatalf("polled %+v, want the child", child[0])
	}
	if resp := testserver.Do(t, b.URL, "POST", "/workers/ack", map[string]any{"worker_id": "w", "task_id": child[0].ID,
		"lease_token": child[0].LeaseToken}, nil); resp.Status != 200 {
		t.Fatalf("ack child: %d %s", resp.Status, resp.Body)
	}
	var w struct{ Status string }
	testserver.Do(t, b.URL, "GET", "/workflows/"+wf.ID, nil, nil).JSON(t, &w)
	if w.Status != "succeeded" {
		t.Fatalf("workflow %s, want succeeded", w.Status)
	}
}
