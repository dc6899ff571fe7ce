package api_test

import (
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testserver"
)

// TestHeartbeatBatch: one request extends every lease the worker holds, refuses
// (lease_lost) the ones it does not hold without failing the others, reports a
// requested cancel per lease, and bad input gets 400 and extends nothing.
func TestHeartbeatBatch(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	for i := 0; i < 3; i++ {
		s.Enqueue("q", map[string]any{"payload": i})
	}
	// Long polls: each returns as soon as the dispatcher buffers what is left.
	var got []testserver.Polled
	for try := 0; len(got) < 3; try++ {
		if try == 4 {
			t.Fatalf("four long polls of 5 s got %d of 3 tasks", len(got))
		}
		got = append(got, s.Poll("w1", []string{"q"}, 3-len(got), 5000)...)
	}
	a, b, c := got[0], got[1], got[2]
	s.Must(202, "DELETE", "/queues/q/tasks/"+b.ID, nil) // executing: cancel requested

	type result struct {
		TaskID          string     `json:"task_id"`
		LeaseExpiresAt  *time.Time `json:"lease_expires_at"`
		CancelRequested *bool      `json:"cancel_requested"`
		Error           *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	lease := func(p testserver.Polled) map[string]any {
		return map[string]any{"task_id": p.ID, "lease_token": p.LeaseToken}
	}
	before := map[string]time.Time{}
	for _, p := range got {
		before[p.ID] = *s.Task("q", p.ID).LeaseExpiresAt
	}
	var out struct {
		Leases []result `json:"leases"`
	}
	stale := map[string]any{"task_id": c.ID, "lease_token": a.LeaseToken} // c with a's token
	s.Must(200, "POST", "/workers/heartbeat/batch", map[string]any{"worker_id": "w1",
		"leases": []any{lease(a), lease(b), stale}}).JSON(t, &out)
	if len(out.Leases) != 3 {
		t.Fatalf("answer: %+v", out)
	}
	for i, want := range []string{a.ID, b.ID, c.ID} {
		if out.Leases[i].TaskID != want {
			t.Fatalf("leases[%d] is %s, want %s (order sent)", i, out.Leases[i].TaskID, want)
		}
	}
	if r := out.Leases[0]; r.Error != nil || r.LeaseExpiresAt == nil || !r.LeaseExpiresAt.After(before[a.ID]) || *r.CancelRequested {
		t.Fatalf("a not extended: %+v (before %v)", r, before[a.ID])
	}
	if r := out.Leases[1]; r.Error != nil || r.CancelRequested == nil || !*r.CancelRequested {
		t.Fatalf("b: cancel not reported: %+v", r)
	}
	if r := out.Leases[2]; r.Error == nil || r.Error.Code != "lease_lost" || r.LeaseExpiresAt != nil {
		t.Fatalf("stale token accepted: %+v", r)
	}
	if after := *s.Task("q", c.ID).LeaseExpiresAt; !after.Equal(before[c.ID]) {
		t.Fatalf("a refused lease was extended: %v → %v", before[c.ID], after)
	}
	// Another worker's batch with the right tokens extends nothing.
	s.Must(200, "POST", "/workers/heartbeat/batch", map[string]any{"worker_id": "w2",
		"leases": []any{lease(c)}}).JSON(t, &out)
	if out.Leases[0].Error == nil || out.Leases[0].Error.Code != "lease_lost" {
		t.Fatalf("another worker's heartbeat: %+v", out.Leases[0])
	}

	tooMany := make([]any, 1001)
	for i := range tooMany {
		tooMany[i] = lease(c)
	}
	for name, body := range map[string]any{
		"no worker":   map[string]any{"leases": []any{lease(c)}},
		"no leases":   map[string]any{"worker_id": "w1", "leases": []any{}},
		"too many":    map[string]any{"worker_id": "w1", "leases": tooMany},
		"no token":    map[string]any{"worker_id": "w1", "leases": []any{map[string]any{"task_id": c.ID}}},
		"bad id":      map[string]any{"worker_id": "w1", "leases": []any{map[string]any{"task_id": "x", "lease_token": c.LeaseToken}}},
		"extra field": map[string]any{"worker_id": "w1", "leases": []any{lease(c)}, "progress": 1},
	} {
		if resp := s.Do("POST", "/workers/heartbeat/batch", body); resp.Status != 400 || resp.ErrorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s", name, resp.Status, resp.Body)
		}
	}
	if after := *s.Task("q", c.ID).LeaseExpiresAt; !after.Equal(before[c.ID]) {
		t.Fatalf("bad input extended a lease: %v → %v", before[c.ID], after)
	}
}
