package api_test

import (
	"net/http"
	"testing"

	"github.com/taskforge/taskforge/internal/testserver"
)

// kill runs one task of queue to death with a permanent nack.
func kill(t *testing.T, s *testserver.Instance, queue string, payload any) testserver.Task {
	t.Helper()
	task := s.Enqueue(queue, map[string]any{"payload": payload})
	var p []testserver.Polled
	for len(p) == 0 {
		p = s.Poll("w", []string{queue}, 1, 5000)
	}
	if p[0].ID != task.ID {
		t.Fatalf("polled %s, want %s", p[0].ID, task.ID)
	}
	s.Must(200, "POST", "/workers/nack", map[string]any{"worker_id": "w", "task_id": p[0].ID,
		"lease_token": p[0].LeaseToken, "error": "boom", "retryable": false})
	return task
}

type deadList struct {
	Tasks []struct {
		testserver.Task
		DiedAt *string `json:"died_at"`
	} `json:"tasks"`
	NextCursor *string `json:"next_cursor"`
}

func TestDeadLetterReplayAndDiscard(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	a := kill(t, s, "q", "a")
	b := kill(t, s, "q", "b")
	c := kill(t, s, "q", "c")

	var dl deadList
	s.Must(200, "GET", "/queues/q/dlq?limit=2", nil).JSON(t, &dl)
	if len(dl.Tasks) != 2 || dl.Tasks[0].ID != c.ID || dl.Tasks[0].DiedAt == nil || dl.NextCursor == nil {
		t.Fatalf("dlq page 1: %+v", dl)
	}
	s.Must(200, "GET", "/queues/q/dlq?limit=2&cursor="+*dl.NextCursor, nil).JSON(t, &dl)
	if len(dl.Tasks) != 1 || dl.Tasks[0].ID != a.ID || dl.NextCursor != nil {
		t.Fatalf("dlq page 2: %+v", dl)
	}

	// Replay one: a new task; the dead one keeps its history and counts the replay.
	var replayed testserver.Task
	s.Must(http.StatusCreated, "POST", "/queues/q/dlq/"+a.ID+"/replay", nil).JSON(t, &replayed)
	if replayed.ID == a.ID || replayed.ReplayedFrom == nil || *replayed.ReplayedFrom != a.ID ||
		replayed.Status != "pending" || string(replayed.Payload) != `"a"` || replayed.Attempts != 0 {
		t.Fatalf("replayed task: %+v", replayed)
	}
	dead := s.Task("q", a.ID)
	if dead.Status != "dead" || dead.ReplayCount != 1 || dead.ReplayedAt == nil || len(dead.AttemptHistory) != 1 {
		t.Fatalf("dead task after replay: %+v", dead)
	}
	var p []testserver.Polled
	for len(p) == 0 {
		p = s.Poll("w", []string{"q"}, 1, 5000)
	}
	if p[0].ID != replayed.ID {
		t.Fatalf("polled %s, want the replay %s", p[0].ID, replayed.ID)
	}
	s.Must(200, "POST", "/workers/ack", map[string]any{"worker_id": "w", "task_id": p[0].ID, "lease_token": p[0].LeaseToken})

	// Bulk replay by ids, then all.
	var bulk struct {
		Replayed []testserver.Task `json:"replayed"`
	}
	s.Must(200, "POST", "/queues/q/dlq/replay", map[string]any{"ids": []string{b.ID}}).JSON(t, &bulk)
	if len(bulk.Replayed) != 1 || *bulk.Replayed[0].ReplayedFrom != b.ID {
		t.Fatalf("bulk replay by id: %+v", bulk)
	}
	s.Must(200, "POST", "/queues/q/dlq/replay", map[string]any{"all": true}).JSON(t, &bulk)
	if len(bulk.Replayed) != 3 {
		t.Fatalf("replay all: %d tasks, want 3 (a, b, c are all still dead)", len(bulk.Replayed))
	}
	if got := s.Task("q", a.ID); got.ReplayCount != 2 {
		t.Fatalf("replay count after two replays: %d", got.ReplayCount)
	}

	// Errors: unknown ids replay nothing; bad bodies are refused.
	missing := "0190a4a0-0000-7000-8000-000000000000"
	if code := s.Must(404, "POST", "/queues/q/dlq/replay", map[string]any{"ids": []string{b.ID, missing}}).ErrorCode(t); code != "task_not_found" {
		t.Fatalf("replay with a missing id: %q", code)
	}
	if got := s.Task("q", b.ID); got.ReplayCount != 2 {
		t.Fatalf("a refused bulk replay changed the task: replay_count %d", got.ReplayCount)
	}
	for _, body := range []any{map[string]any{}, map[string]any{"all": true, "ids": []string{b.ID}}, map[string]any{"ids": []string{"x"}}, `{"all": 1}`} {
		if resp := s.Do("POST", "/queues/q/dlq/replay", body); resp.Status != 400 {
			t.Errorf("replay body %v: %d %s", body, resp.Status, resp.Body)
		}
	}
	if code := s.Must(404, "POST", "/queues/q/dlq/"+replayed.ID+"/replay", nil).ErrorCode(t); code != "task_not_found" {
		t.Fatalf("replay of a task that is not dead: %q", code)
	}
	if code := s.Must(404, "GET", "/queues/nope/dlq", nil).ErrorCode(t); code != "queue_not_found" {
		t.Fatalf("dlq of missing queue: %q", code)
	}

	// Discard: the dead task and its attempts are gone.
	s.Must(http.StatusNoContent, "DELETE", "/queues/q/dlq/"+c.ID, nil)
	s.Must(404, "GET", "/queues/q/tasks/"+c.ID, nil)
	if code := s.Must(404, "DELETE", "/queues/q/dlq/"+c.ID, nil).ErrorCode(t); code != "task_not_found" {
		t.Fatalf("discard twice: %q", code)
	}
	if code := s.Must(404, "DELETE", "/queues/q/dlq/"+replayed.ID, nil).ErrorCode(t); code != "task_not_found" {
		t.Fatalf("discard a done task: %q", code)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	kill(t, s, "q", "dead")
	done := s.Enqueue("q", map[string]any{"payload": "ok"})
	p := s.Poll("w", []string{"q"}, 1, 5000)
	if len(p) != 1 || p[0].ID != done.ID {
		t.Fatalf("poll: %+v", p)
	}
	s.Must(200, "POST", "/workers/ack", map[string]any{"worker_id": "w", "task_id": p[0].ID, "lease_token": p[0].LeaseToken})
	s.Enqueue("q", map[string]any{"payload": "waiting", "scheduled_at": "2099-01-01T00:00:00Z"})

	var st struct {
		Queue                  string           `json:"queue"`
		Depth                  map[string]int64 `json:"depth"`
		ThroughputPerSec       float64          `json:"throughput_per_sec"`
		ErrorRate              float64          `json:"error_rate"`
		OldestPendingAgeSecond float64          `json:"oldest_pending_age_seconds"`
		DLQDepth               int64            `json:"dlq_depth"`
	}
	s.Must(200, "GET", "/queues/q/stats", nil).JSON(t, &st)
	// One success over the window, which moves in 10-second steps: 50 to 60 s long.
	if st.Queue != "q" || st.Depth["dead"] != 1 || st.Depth["done"] != 1 || st.Depth["pending"] != 1 ||
		st.Depth["executing"] != 0 || st.DLQDepth != 1 || st.ErrorRate != 0.5 ||
		st.ThroughputPerSec < 1.0/60 || st.ThroughputPerSec > 1.0/50 || st.OldestPendingAgeSecond != 0 {
		t.Fatalf("stats: %+v", st)
	}
}
