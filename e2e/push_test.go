package e2e_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

// TestPushReplicaSIGKILLedMidRequest: a replica dies while its push request is in
// flight; once the attempt's lease (timeout_ms plus the margin) ends, another
// replica's watchdog reclaims it, counted as abandoned, and its pusher delivers the
// task again.
func TestPushReplicaSIGKILLedMidRequest(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	first, stop := make(chan struct{}), make(chan struct{})
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // read whole, so a closed connection ends r.Context()
		if requests.Add(1) == 1 {
			close(first)
			select { // held until its replica dies
			case <-r.Context().Done():
			case <-stop:
			}
		}
	}))
	defer tg.Close()
	defer close(stop)

	dbURL, prefix := testenv.NewDatabase(t), testenv.RedisPrefix(t)
	a := startReplica(t, []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + testenv.RedisAddr(t),
		"TASKFORGE_REDIS_PREFIX=" + prefix,
		"TASKFORGE_WATCHDOG_INTERVAL=200ms",
		"TASKFORGE_DISPATCH_INTERVAL=100ms",
		"TASKFORGE_LOG_LEVEL=warn",
	})
	if resp := testserver.Do(t, a.URL, "POST", "/queues", map[string]any{"name": "hooks",
		"push": map[string]any{"url": tg.URL, "timeout_ms": 1000}}, nil); resp.Status != http.StatusCreated {
		t.Fatalf("create queue: %d %s", resp.Status, resp.Body)
	}
	var task testserver.Task
	resp := testserver.Do(t, a.URL, "POST", "/queues/hooks/tasks", map[string]any{"payload": map[string]any{"n": 1}}, nil)
	resp.JSON(t, &task)
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("replica A never pushed the task")
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	b := testserver.Start(t, testserver.Options{DatabaseURL: dbURL, RedisPrefix: prefix,
		Configure: func(c *server.Config) { c.Push.ReplicaID = "b" }})
	var done testserver.Task
	testserver.Eventually(t, 30*time.Second, "the task delivered again and done", func() bool {
		done = b.Task("hooks", task.ID)
		return done.Status == "done"
	})
	h := done.AttemptHistory
	if len(h) != 2 || h[0].Status != "abandoned" || !strings.HasPrefix(h[0].WorkerID, "push:") ||
		h[1].Status != "succeeded" || h[1].WorkerID != "push:b" {
		t.Fatalf("attempts %+v, want one abandoned by A's pusher, then one succeeded by push:b", h)
	}
	// The lease covered the request's timeout (1 s) and the margin (5 s).
	if lasted := h[0].FinishedAt.Sub(h[0].StartedAt); lasted < 6*time.Second {
		t.Fatalf("the killed attempt was reclaimed after %s, before its lease of timeout_ms + margin", lasted)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("target got %d requests, want 2", n)
	}
	metrics := b.Must(http.StatusOK, "GET", "/metrics", nil)
	if !strings.Contains(string(metrics.Body), `taskforge_watchdog_reclaims_total{queue="hooks",reason="abandoned"} 1`) {
		t.Fatal("the reclaim of the killed attempt is not counted")
	}
	if !strings.Contains(string(metrics.Body), `taskforge_push_requests_total{outcome="success",queue="hooks"} 1`) {
		t.Fatal("the second delivery is not counted in taskforge_push_requests_total")
	}
}
