package wire_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/client/wire"
)

func encode(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The optional parts of a task are told apart by nil, not by emptiness: a GET of
// a task with no attempt yet says attempt_history: [], a listing says nothing.
func TestTaskOptionalFields(t *testing.T) {
	listed := encode(t, wire.Task{})
	for _, key := range []string{`"attempt_history"`, `"died_at"`} {
		if strings.Contains(listed, key) {
			t.Errorf("a task without %s encodes it: %s", key, listed)
		}
	}
	for _, key := range []string{`"payload":null`, `"result":null`, `"progress":null`, `"workflow_id":null`, `"finished_at":null`} {
		if !strings.Contains(listed, key) {
			t.Errorf("a task encodes no %s: %s", key, listed)
		}
	}
	if got := encode(t, wire.Task{AttemptHistory: []wire.Attempt{}}); !strings.Contains(got, `"attempt_history":[]`) {
		t.Errorf("an empty attempt history is not []: %s", got)
	}
}

// A poll's zero wait is sent (the server reads an absent one as zero too, but
// the SDK says what it means); what a poll does not ask for is left out.
func TestPollRequestFields(t *testing.T) {
	one, zero := 1, 0
	got := encode(t, wire.PollRequest{WorkerID: "w", Queues: []string{"q"}, MaxTasks: &one, WaitMs: &zero})
	if want := `{"worker_id":"w","queues":["q"],"max_tasks":1,"wait_ms":0}`; got != want {
		t.Errorf("poll encodes as %s, want %s", got, want)
	}
	got = encode(t, wire.PollRequest{WorkerID: "w", Queues: []string{"q"}, Prefetch: true,
		Acks: []wire.AckItem{{TaskID: "t", LeaseToken: "l"}}})
	if want := `{"worker_id":"w","queues":["q"],"prefetch":true,"acks":[{"task_id":"t","lease_token":"l"}]}`; got != want {
		t.Errorf("poll encodes as %s, want %s", got, want)
	}
}

// A heartbeat without a task carries the worker id alone; JSON null progress is
// sent (it clears the attempt's progress), absent progress is not.
func TestHeartbeatRequestFields(t *testing.T) {
	if got, want := encode(t, wire.HeartbeatRequest{LeaseRequest: wire.LeaseRequest{WorkerID: "w"}}), `{"worker_id":"w"}`; got != want {
		t.Errorf("worker heartbeat encodes as %s, want %s", got, want)
	}
	got := encode(t, wire.HeartbeatRequest{LeaseRequest: wire.LeaseRequest{WorkerID: "w", TaskID: "t", LeaseToken: "l"},
		Progress: json.RawMessage("null")})
	if want := `{"worker_id":"w","task_id":"t","lease_token":"l","progress":null}`; got != want {
		t.Errorf("heartbeat encodes as %s, want %s", got, want)
	}
}

// An empty poll answer is {"tasks": []}: never null, no acks, no retry hint.
func TestPollResponseEmpty(t *testing.T) {
	if got, want := encode(t, wire.PollResponse{Tasks: []wire.PolledTask{}}), `{"tasks":[]}`; got != want {
		t.Errorf("empty poll answer encodes as %s, want %s", got, want)
	}
}
