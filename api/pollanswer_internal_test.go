package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client/wire"
)

// TestPollAnswerBytesAreEncodingJSONs: appendPollResponse writes every poll answer
// byte for byte as encoding/json does (what c.JSON wrote before): payloads as
// PostgreSQL's jsonb gives them back (spaces after colons and commas) compacted,
// HTML characters and U+2028 escaped in payloads and strings, nil pointers and
// payloads as null, acks and retry_after_ms only when set; a payload encoding/json
// refuses makes it hand the answer back to encoding/json.
func TestPollAnswerBytesAreEncodingJSONs(t *testing.T) {
	ptr := func(s string) *string { return &s }
	timeout := 30
	at := time.Date(2026, 12, 5, 11, 50, 1, 123456789, time.UTC)
	task := func(payload string) wire.PolledTask {
		return wire.PolledTask{ID: "0193a5e4-7c4f-8d2e-9b1a-3c5d7e9f1a2b", Queue: "emails", Payload: json.RawMessage(payload),
			Priority: 3, Attempt: 1, LeaseToken: "0193a5e4-7c4f-8000-9b1a-3c5d7e9f1a2b", LeaseExpiresAt: at, HeartbeatIntervalMs: 10000}
	}
	full := task(`{"a": [1, "é", {"b": null}], "html": "<b>&</b>", "sep": "x\u2028y"}`)
	full.TimeoutSeconds, full.Traceparent = &timeout, ptr("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	full.WorkflowID, full.Step, full.Group = ptr("0193a5e4-0000-7000-8000-000000000000"), ptr(`step "one" <1>`), ptr("tenant-é\n")
	// A field added to wire.PolledTask must be set here, so that the comparison
	// below sees it whether or not it is omitempty: appendPolledTask writes its
	// fields by name and would leave a new one out.
	fields := reflect.ValueOf(full)
	for i := range fields.NumField() {
		if fields.Field(i).IsZero() {
			t.Fatalf("wire.PolledTask.%s is not set in the full task: set it, and write it in appendPolledTask",
				fields.Type().Field(i).Name)
		}
	}
	noZone := task(`"text"`)
	noZone.LeaseExpiresAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	for name, r := range map[string]wire.PollResponse{
		"empty":       {Tasks: []wire.PolledTask{}},
		"nil tasks":   {},
		"retry":       {Tasks: []wire.PolledTask{}, RetryAfterMs: 250},
		"plain":       {Tasks: []wire.PolledTask{task(`{"n": 1}`), task(`null`), task(`[ 1 , 2 ]`), noZone}},
		"full":        {Tasks: []wire.PolledTask{full, {}}},
		"nil payload": {Tasks: []wire.PolledTask{task("")}},
		"acks": {Tasks: []wire.PolledTask{task(`0`)}, Acks: []wire.AckResult{{TaskID: "a"},
			{TaskID: "b", Error: &wire.ErrorDetail{Code: "lease_lost", Message: "the lease <expired> & was taken"}}}},
	} {
		if name == "nil payload" {
			r.Tasks[0].Payload = nil
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, ok := appendPollResponse(nil, r)
		if !ok || !bytes.Equal(got, want) {
			t.Errorf("%s: wrote (ok %v)\n%s\nencoding/json writes\n%s", name, ok, got, want)
		}
	}
	bad := wire.PollResponse{Tasks: []wire.PolledTask{task(`{"a": `)}}
	if got, ok := appendPollResponse(nil, bad); ok {
		t.Errorf("a payload that is not JSON written as %s", got)
	}
}
