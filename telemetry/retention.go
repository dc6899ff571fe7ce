package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RetentionSweep is what one retention sweep (package janitor) did to task history,
// and the day partitions it left.
type RetentionSweep struct {
	At                time.Time
	Failed            bool
	PartitionsDropped int   // days of one status dropped whole
	RowsDropped       int64 // the tasks they held
	BatchDeleted      int64 // tasks deleted in batches
	// Partitions counts the day partitions of history by status, and Oldest holds
	// each status's oldest day (midnight UTC).
	Partitions map[string]int
	Oldest     map[string]time.Time
}

// retentionMetrics show the retention janitor's progress and history's partitions.
type retentionMetrics struct {
	sweeps       *prometheus.CounterVec
	dropped      prometheus.Counter
	rowsDropped  prometheus.Counter
	batchDeleted prometheus.Counter
	lastSweep    prometheus.Gauge
	partitions   *prometheus.GaugeVec
	oldest       *prometheus.GaugeVec
	// the mover of finished tasks left in tasks by a release before history
	backfillMoved prometheus.Counter
	backfillLeft  prometheus.Gauge
}

func (m *retentionMetrics) register(reg *prometheus.Registry) {
	m.sweeps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_retention_sweeps_total",
		Help: "Retention sweeps of this replica, by outcome (ok, failed)."}, []string{"outcome"})
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "taskforge_retention_partitions_dropped_total",
		Help: "Days of task history (one status each) dropped whole, with their attempts."})
	m.rowsDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "taskforge_retention_rows_dropped_total",
		Help: "Finished tasks that left with a dropped day of history."})
	m.batchDeleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "taskforge_retention_rows_batch_deleted_total",
		Help: "Finished tasks deleted in batches (a queue's shorter retention, or rows not in history yet)."})
	m.lastSweep = prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskforge_retention_last_sweep_timestamp_seconds",
		Help: "When this replica's last retention sweep started (Unix seconds)."})
	m.partitions = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskforge_history_partitions",
		Help: "Day partitions of task history, by final status, as of the last sweep."}, []string{"status"})
	m.oldest = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskforge_history_oldest_partition_age_seconds",
		Help: "Age of the start of the oldest day partition of task history, by final status, as of the last sweep."}, []string{"status"})
	m.backfillMoved = prometheus.NewCounter(prometheus.CounterOpts{Name: "taskforge_history_backfill_moved_total",
		Help: "Finished tasks that a release before history left in tasks, moved into history by this replica."})
	m.backfillLeft = prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskforge_history_backfill_left",
		Help: "Finished tasks still in tasks, waiting for the mover, as this replica's mover last counted them."})
	reg.MustRegister(m.sweeps, m.dropped, m.rowsDropped, m.batchDeleted, m.lastSweep, m.partitions, m.oldest,
		m.backfillMoved, m.backfillLeft)
}

// RetentionSwept records one retention sweep.
func (t *Telemetry) RetentionSwept(s RetentionSweep) {
	if t == nil {
		return
	}
	m := &t.retention
	outcome := "ok"
	if s.Failed {
		outcome = "failed"
	}
	m.sweeps.WithLabelValues(outcome).Inc()
	m.dropped.Add(float64(s.PartitionsDropped))
	m.rowsDropped.Add(float64(s.RowsDropped))
	m.batchDeleted.Add(float64(s.BatchDeleted))
	m.lastSweep.Set(float64(s.At.UnixNano()) / 1e9)
	if s.Partitions == nil { // a sweep that failed before it listed them
		return
	}
	for _, status := range []string{"done", "cancelled", "dead"} {
		m.partitions.WithLabelValues(status).Set(float64(s.Partitions[status]))
		if day, ok := s.Oldest[status]; ok {
			m.oldest.WithLabelValues(status).Set(s.At.Sub(day).Seconds())
		} else {
			m.oldest.DeleteLabelValues(status)
		}
	}
}

// HistoryBackfilled records a batch (or the end of a run) of the mover of finished
// tasks left in tasks by a release before history: moved more rows moved, left
// still to move.
func (t *Telemetry) HistoryBackfilled(moved, left int64) {
	if t == nil {
		return
	}
	t.retention.backfillMoved.Add(float64(moved))
	t.retention.backfillLeft.Set(float64(left))
}
