package api

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/storage"
)

// TestMinimalBatchBody: the minimal answer to a batch enqueue, written by hand, is
// byte for byte what encoding/json writes for wire.EnqueueBatchMinimalResponse,
// for one task, many, and ids with every hex digit.
func TestMinimalBatchBody(t *testing.T) {
	ids := []uuid.UUID{
		uuid.MustParse("00000000-0000-0000-0000-000000000000"),
		uuid.MustParse("01234567-89ab-cdef-0123-456789abcdef"),
		uuid.MustParse("ffffffff-ffff-ffff-ffff-ffffffffffff"),
	}
	for range 50 {
		ids = append(ids, uuid.Must(uuid.NewV7()))
	}
	for _, n := range []int{1, 2, len(ids)} {
		out := make([]storage.Enqueued, n)
		refs := make([]wire.TaskRef, n)
		for i := range out {
			out[i].Task.ID = ids[i]
			refs[i] = wire.TaskRef{ID: ids[i].String()}
		}
		want, err := json.Marshal(wire.EnqueueBatchMinimalResponse{Tasks: refs})
		if err != nil {
			t.Fatal(err)
		}
		if got := minimalBatchBody(out); string(got) != string(want) {
			t.Errorf("%d tasks:\n got %s\nwant %s", n, got, want)
		}
	}
}
