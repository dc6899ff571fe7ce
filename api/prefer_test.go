package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/taskforge/taskforge/internal/testserver"
)

// TestMinimalAnswers: "Prefer: return=minimal" (in any case, among other
// preferences) makes a batch enqueue answer each task with its id alone and a
// batch ack leave out the done tasks, says so in Preference-Applied, and changes
// nothing else: the tasks are stored, the acks committed, a stale token refused.
// With another preference (return=representation) the answers carry the task
// objects, and nothing says a preference was applied; nor does an error answer.
// Tasks enqueued either way go to the buffer by their priority.
func TestMinimalAnswers(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	minimal := http.Header{"Prefer": {"respond-async, RETURN=Minimal"}}

	batch := map[string]any{"tasks": []any{
		map[string]any{"payload": 1}, map[string]any{"payload": 2, "priority": 1}, map[string]any{"payload": 3}}}
	resp := testserver.Do(t, s.URL, "POST", "/queues/q/tasks/batch", batch, minimal)
	if resp.Status != http.StatusCreated || resp.Header.Get("Preference-Applied") != "return=minimal" {
		t.Fatalf("minimal batch enqueue: %d, Preference-Applied %q: %s", resp.Status, resp.Header.Get("Preference-Applied"), resp.Body)
	}
	var refs struct {
		Tasks []map[string]json.RawMessage `json:"tasks"`
	}
	resp.JSON(t, &refs)
	if len(refs.Tasks) != 3 {
		t.Fatalf("minimal batch enqueue answered %d tasks: %s", len(refs.Tasks), resp.Body)
	}
	for i, ref := range refs.Tasks {
		var id string
		if err := json.Unmarshal(ref["id"], &id); err != nil || len(ref) != 1 {
			t.Fatalf("task %d of the minimal answer is %v, want only its id", i, ref)
		}
		if got := s.Task("q", id); string(got.Payload) != []string{"1", "2", "3"}[i] {
			t.Fatalf("task %d (%s) holds %s", i, id, got.Payload)
		}
	}
	missing := testserver.Do(t, s.URL, "POST", "/queues/nope/tasks/batch", batch, minimal)
	if missing.Status != http.StatusNotFound || missing.Header.Get("Preference-Applied") != "" {
		t.Fatalf("minimal batch into a missing queue: %d, Preference-Applied %q, want 404 saying nothing applied",
			missing.Status, missing.Header.Get("Preference-Applied"))
	}
	full := testserver.Do(t, s.URL, "POST", "/queues/q/tasks/batch", batch, http.Header{"Prefer": {"return=representation"}})
	var tasks struct {
		Tasks []testserver.Task `json:"tasks"`
	}
	full.JSON(t, &tasks)
	if full.Status != http.StatusCreated || len(tasks.Tasks) != 3 || tasks.Tasks[1].Priority != 1 || full.Header.Get("Preference-Applied") != "" {
		t.Fatalf("batch enqueue without the preference: %s (Preference-Applied %q)", full.Body, full.Header.Get("Preference-Applied"))
	}

	// Both batches went straight to the buffer, the minimal one from the few columns
	// its statement read back: the priority-1 task of each comes out first.
	polled := s.Poll("w", []string{"q"}, 2, 2000)
	if len(polled) != 2 || polled[0].Priority != 1 || polled[1].Priority != 1 {
		t.Fatalf("polled %+v, want the two tasks of priority 1", polled)
	}
	acks := []any{
		map[string]any{"task_id": polled[0].ID, "lease_token": polled[0].LeaseToken},
		map[string]any{"task_id": polled[1].ID, "lease_token": "00000000-0000-4000-8000-000000000000"},
	}
	resp = testserver.Do(t, s.URL, "POST", "/workers/ack/batch", map[string]any{"worker_id": "w", "acks": acks},
		http.Header{"Prefer": {"return=minimal"}})
	if resp.Status != http.StatusOK || resp.Header.Get("Preference-Applied") != "return=minimal" {
		t.Fatalf("minimal batch ack: %d, Preference-Applied %q: %s", resp.Status, resp.Header.Get("Preference-Applied"), resp.Body)
	}
	var out struct {
		Results []map[string]json.RawMessage `json:"results"`
	}
	resp.JSON(t, &out)
	if len(out.Results) != 2 || len(out.Results[0]) != 1 || out.Results[1]["error"] == nil || out.Results[1]["task"] != nil {
		t.Fatalf("minimal batch ack answered %s, want the first with its task_id alone and the second lease_lost", resp.Body)
	}
	if st := s.Task("q", polled[0].ID).Status; st != "done" {
		t.Fatalf("the minimal ack left its task %s", st)
	}
	if st := s.Task("q", polled[1].ID).Status; st != "executing" {
		t.Fatalf("the stale-token ack changed its task: %s", st)
	}
}
