package telemetry_test

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskforge/taskforge/telemetry"
)

// TestRetentionSweptShowsHistory: a sweep's drops and deletions add up in counters,
// and the partitions it left show by status with their oldest day's age.
func TestRetentionSweptShowsHistory(t *testing.T) {
	tel := telemetry.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for range 2 {
		tel.RetentionSwept(telemetry.RetentionSweep{At: at, PartitionsDropped: 2, RowsDropped: 1000, BatchDeleted: 7,
			Partitions: map[string]int{"done": 10, "dead": 3},
			Oldest:     map[string]time.Time{"done": at.AddDate(0, 0, -8).Truncate(24 * time.Hour), "dead": at.AddDate(0, 0, -30).Truncate(24 * time.Hour)}})
	}
	tel.RetentionSwept(telemetry.RetentionSweep{At: at, Failed: true})
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`taskforge_retention_sweeps_total{outcome="ok"} 2`,
		`taskforge_retention_sweeps_total{outcome="failed"} 1`,
		`taskforge_retention_partitions_dropped_total 4`,
		`taskforge_retention_rows_dropped_total 2000`,
		`taskforge_retention_rows_batch_deleted_total 14`,
		`taskforge_history_partitions{status="done"} 10`,
		`taskforge_history_partitions{status="cancelled"} 0`,
		`taskforge_history_oldest_partition_age_seconds{status="done"} 734400`,
		`taskforge_history_oldest_partition_age_seconds{status="dead"} 2.6352e+06`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `taskforge_history_oldest_partition_age_seconds{status="cancelled"}`) {
		t.Error("an age is shown for a status without partitions")
	}
}
