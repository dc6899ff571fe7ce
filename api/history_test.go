package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testserver"
)

// TestHistoryShowsPartitionsAndLastSweep: GET /history lists each final status's day
// partitions (the migration and every sweep create them ahead) and, once the
// replica's janitor has swept, what its last sweep did.
func TestHistoryShowsPartitionsAndLastSweep(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	type answer struct {
		Statuses []struct {
			Status     string
			Partitions int
			Oldest     string `json:"oldest_day"`
		}
		LastSweep *struct {
			At           time.Time
			RowsDropped  int64 `json:"rows_dropped"`
			BatchDeleted int64 `json:"batch_deleted"`
			Error        *string
		} `json:"last_sweep"`
	}
	var got answer
	testserver.Eventually(t, 10*time.Second, "the janitor's first sweep", func() bool {
		got = answer{}
		s.Must(http.StatusOK, "GET", "/history", nil).JSON(t, &got)
		return got.LastSweep != nil
	})
	if len(got.Statuses) != 3 || got.Statuses[0].Status != "done" || got.Statuses[2].Status != "dead" {
		t.Fatalf("statuses %+v", got.Statuses)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	for _, st := range got.Statuses {
		if st.Partitions < 4 || st.Oldest == "" || st.Oldest > today {
			t.Errorf("%s: %d partitions from %q, want at least today and three days ahead", st.Status, st.Partitions, st.Oldest)
		}
	}
	if got.LastSweep.Error != nil || got.LastSweep.At.IsZero() {
		t.Errorf("last sweep %+v", got.LastSweep)
	}
}
