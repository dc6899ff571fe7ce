package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

// TestSnoozeSpendsNoRetryAndComesBackOnTime: a task its queue allows one run
// (max_retries 0) is snoozed five times for a second (POST /workers/release with
// delay_ms) and still ends done; each attempt starts about a second after the one
// before, on the database clock. The dispatcher's tick is an hour, so only the
// release's wake-up can have planned the pass that brings the task back.
func TestSnoozeSpendsNoRetryAndComesBackOnTime(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) { c.DispatchInterval = time.Hour }})
	s.CreateQueue("q", map[string]any{"max_retries": 0})
	task := s.Enqueue("q", map[string]any{"payload": "later"})

	const snoozes = 5
	for i := range snoozes {
		ps := s.Poll("w", []string{"q"}, 1, 10000) // a long poll: waits on the wake-up, not a sleep
		if len(ps) != 1 || ps[0].ID != task.ID || ps[0].Attempt != i+1 {
			t.Fatalf("poll %d: %+v, want attempt %d of %s", i+1, ps, i+1, task.ID)
		}
		var got testserver.Task
		s.Must(200, "POST", "/workers/release", map[string]any{"worker_id": "w", "task_id": ps[0].ID,
			"lease_token": ps[0].LeaseToken, "reason": "not yet", "delay_ms": 1000}).JSON(t, &got)
		if d := got.ScheduledAt.Sub(got.UpdatedAt); got.Status != "pending" || got.Releases != i+1 ||
			d < time.Second || d > time.Second+50*time.Millisecond {
			t.Fatalf("snooze %d: status %s, releases %d, due %s after the release", i+1, got.Status, got.Releases, d)
		}
	}
	ps := s.Poll("w", []string{"q"}, 1, 10000)
	if len(ps) != 1 || ps[0].Attempt != snoozes+1 {
		t.Fatalf("last poll: %+v", ps)
	}
	var done testserver.Task
	s.Must(200, "POST", "/workers/ack", map[string]any{"worker_id": "w", "task_id": ps[0].ID, "lease_token": ps[0].LeaseToken}).JSON(t, &done)
	if done.Status != "done" || done.Attempts != snoozes+1 || done.Releases != snoozes {
		t.Fatalf("after %d snoozes: %+v", snoozes, done)
	}
	h := s.Task("q", task.ID).AttemptHistory
	if len(h) != snoozes+1 {
		t.Fatalf("history has %d attempts, want %d", len(h), snoozes+1)
	}
	for i := 1; i < len(h); i++ {
		if h[i-1].Status != "released" {
			t.Errorf("attempt %d ended %s, want released", i, h[i-1].Status)
		}
		gap := h[i].StartedAt.Sub(h[i-1].StartedAt)
		if gap < time.Second || gap >= 2500*time.Millisecond {
			t.Errorf("attempt %d started %s after attempt %d; want 1 s to 2.5 s", i+1, gap, i)
		}
		t.Logf("attempt %d started %s after attempt %d", i+1, gap, i)
	}
	if h[snoozes].Status != "succeeded" {
		t.Errorf("last attempt ended %s", h[snoozes].Status)
	}
}

// TestSnoozeRejectsBadDelaysAndChangesNothing: a negative, too large or non-integer
// delay_ms gets 400 and leaves the task executing under the same lease.
func TestSnoozeRejectsBadDelaysAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	task := s.Enqueue("q", map[string]any{"payload": 1})
	p := s.Poll("w", []string{"q"}, 1, 5000)[0]
	before := s.Do("GET", "/queues/q/tasks/"+task.ID, nil).Body
	for _, delay := range []any{-1, 86_400_001, "1000", 1.5, true} {
		resp := s.Do("POST", "/workers/release", map[string]any{"worker_id": "w", "task_id": p.ID,
			"lease_token": p.LeaseToken, "delay_ms": delay})
		if resp.Status != 400 || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("delay_ms %v: %d %s", delay, resp.Status, resp.Body)
		}
	}
	if after := s.Do("GET", "/queues/q/tasks/"+task.ID, nil).Body; !bytes.Equal(before, after) {
		t.Fatalf("refused snoozes changed the task:\nbefore %s\nafter  %s", before, after)
	}
	// The bounds themselves are accepted: a day.
	var got testserver.Task
	s.Must(200, "POST", "/workers/release", map[string]any{"worker_id": "w", "task_id": p.ID,
		"lease_token": p.LeaseToken, "delay_ms": 86_400_000}).JSON(t, &got)
	if d := got.ScheduledAt.Sub(got.UpdatedAt); got.Status != "pending" || d < 24*time.Hour || d > 24*time.Hour+time.Second {
		t.Fatalf("a day's snooze: %s, due in %s", got.Status, d)
	}
}

// progressTask is the part of the task object these tests read.
type progressTask struct {
	Status   string          `json:"status"`
	Attempts int             `json:"attempts"`
	Progress json.RawMessage `json:"progress"`
}

func getProgress(t *testing.T, s *testserver.Instance, id string) progressTask {
	t.Helper()
	var pt progressTask
	s.Must(200, "GET", "/queues/q/tasks/"+id, nil).JSON(t, &pt)
	return pt
}

// TestHeartbeatProgress: progress sent with a heartbeat is on the task (GET and
// lists) until the next report, survives heartbeats without progress and the end of
// the attempt, and is cleared when the next attempt starts; JSON null clears it.
// Oversized, non-JSON or misplaced progress gets 400 and changes nothing, and a
// stale lease 409.
func TestHeartbeatProgress(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"max_retries": 3})
	task := s.Enqueue("q", map[string]any{"payload": "long"})
	p := s.Poll("w", []string{"q"}, 1, 5000)[0]
	hb := func(progress any) testserver.Response {
		body := map[string]any{"worker_id": "w", "task_id": p.ID, "lease_token": p.LeaseToken}
		if progress != nil {
			body["progress"] = progress
		}
		return s.Do("POST", "/workers/heartbeat", body)
	}
	if got := getProgress(t, s, task.ID); string(got.Progress) != "null" {
		t.Fatalf("progress before any report: %s", got.Progress)
	}
	if resp := hb(map[string]any{"done": 3, "of": 10}); resp.Status != 200 {
		t.Fatalf("heartbeat with progress: %d %s", resp.Status, resp.Body)
	}
	if got := getProgress(t, s, task.ID); string(got.Progress) != `{"of":10,"done":3}` {
		t.Fatalf("GET progress: %s", got.Progress)
	}
	var list struct {
		Tasks []progressTask `json:"tasks"`
	}
	s.Must(200, "GET", "/queues/q/tasks", nil).JSON(t, &list)
	if len(list.Tasks) != 1 || string(list.Tasks[0].Progress) != `{"of":10,"done":3}` {
		t.Fatalf("listed progress: %+v", list.Tasks)
	}
	hb(nil) // a heartbeat without progress keeps it
	hb("7 of 10")
	if got := getProgress(t, s, task.ID); string(got.Progress) != `"7 of 10"` {
		t.Fatalf("progress after a second report: %s", got.Progress)
	}

	// Bad input: 400, and the task (lease included) is as it was.
	before := s.Do("GET", "/queues/q/tasks/"+task.ID, nil).Body
	big := strings.Repeat("x", 4096-2+1) // a JSON string of 4097 bytes
	for name, body := range map[string]any{
		"oversized": map[string]any{"worker_id": "w", "task_id": p.ID, "lease_token": p.LeaseToken, "progress": big},
		"not JSON":  fmt.Sprintf(`{"worker_id": "w", "task_id": %q, "lease_token": %q, "progress": half-done}`, p.ID, p.LeaseToken),
		"no task":   map[string]any{"worker_id": "w", "progress": 1},
	} {
		if resp := s.Do("POST", "/workers/heartbeat", body); resp.Status != 400 || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("%s progress: %d %s", name, resp.Status, resp.Body)
		}
	}
	if after := s.Do("GET", "/queues/q/tasks/"+task.ID, nil).Body; !bytes.Equal(before, after) {
		t.Fatalf("refused heartbeats changed the task:\nbefore %s\nafter  %s", before, after)
	}
	if resp := hb(strings.Repeat("y", 4096-2)); resp.Status != 200 { // exactly the limit
		t.Fatalf("progress of 4096 bytes: %d %s", resp.Status, resp.Body)
	}
	if resp := hb(nil); resp.Status != 200 {
		t.Fatal(resp.Status)
	}
	if resp := s.Do("POST", "/workers/heartbeat", map[string]any{"worker_id": "w", "task_id": p.ID,
		"lease_token": p.LeaseToken, "progress": nil}); resp.Status != 200 {
		t.Fatalf("null progress: %d %s", resp.Status, resp.Body)
	}
	if got := getProgress(t, s, task.ID); string(got.Progress) != "null" {
		t.Fatalf("progress after null: %s", got.Progress)
	}
	hb(map[string]any{"step": "upload"})

	// The attempt fails: its progress stays; a stale lease may not change it.
	s.Nack("w", p, "disk full", map[string]any{"retry_after_ms": 0})
	if resp := hb("stale"); resp.Status != 409 {
		t.Fatalf("heartbeat on a lost lease: %d %s", resp.Status, resp.Body)
	}
	if got := getProgress(t, s, task.ID); got.Status != "retry" && got.Status != "claimed" || string(got.Progress) != `{"step":"upload"}` {
		t.Fatalf("after the failed attempt: %+v (%s)", got, got.Progress)
	}
	// The next attempt starts with none.
	p2 := s.Poll("w2", []string{"q"}, 1, 5000)
	if len(p2) != 1 || p2[0].Attempt != 2 {
		t.Fatalf("second attempt: %+v", p2)
	}
	if got := getProgress(t, s, task.ID); got.Status != "executing" || string(got.Progress) != "null" {
		t.Fatalf("at the second attempt: %+v (%s)", got, got.Progress)
	}
}
