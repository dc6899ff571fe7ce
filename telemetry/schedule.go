package telemetry

import "time"

// ScheduleFired counts a fired tick of schedule and observes how late it fired
// (from the tick to the transaction that enqueued its task).
func (t *Telemetry) ScheduleFired(schedule string, lateness time.Duration) {
	if t == nil {
		return
	}
	t.scheduleRuns.WithLabelValues(schedule).Inc()
	t.scheduleLate.Observe(max(lateness, 0).Seconds())
}
