package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/client/wire"
)

// TestParseLeaseFields: the server reads a report's lease from the very type the
// Go SDK encodes; bad or half leases are 400s naming what is wrong.
func TestParseLeaseFields(t *testing.T) {
	id, token := uuid.New(), uuid.New()
	for _, tc := range []struct {
		name     string
		body     string
		withTask bool
		want     leaseFields
		wantErr  string
	}{
		{name: "worker only", body: `{"worker_id":"w"}`, want: leaseFields{}},
		{name: "null lease", body: `{"worker_id":"w","task_id":null,"lease_token":null}`, want: leaseFields{}},
		{name: "lease", body: `{"worker_id":"w","task_id":"` + id.String() + `","lease_token":"` + token.String() + `"}`,
			withTask: true, want: leaseFields{taskID: id, token: token, set: true}},
		{name: "no worker", body: `{"task_id":"` + id.String() + `","lease_token":"` + token.String() + `"}`, wantErr: "worker_id is required"},
		{name: "task without token", body: `{"worker_id":"w","task_id":"` + id.String() + `"}`, wantErr: "go together"},
		{name: "lease required", body: `{"worker_id":"w"}`, withTask: true, wantErr: "task_id and lease_token are required"},
		{name: "not UUIDs", body: `{"worker_id":"w","task_id":"x","lease_token":"y"}`, wantErr: "must be UUIDs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r wire.LeaseRequest
			if err := json.Unmarshal([]byte(tc.body), &r); err != nil {
				t.Fatal(err)
			}
			got, err := parseLeaseFields(r, tc.withTask)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || toAPIError(err).Status != 400 {
					t.Fatalf("parseLeaseFields(%s) = %+v, %v; want a 400 containing %q", tc.body, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseLeaseFields(%s) = %+v, %v; want %+v", tc.body, got, err, tc.want)
			}
		})
	}
}
