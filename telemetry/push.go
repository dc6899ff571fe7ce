package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a push request, the values of taskforge_push_requests_total's
// outcome label.
const (
	PushSuccess     = "success"      // 2xx: the task is done
	PushRateLimited = "rate_limited" // 429: retried
	PushServerError = "server_error" // 5xx: retried
	PushClientError = "client_error" // any other status: dead at once
	PushTimeout     = "timeout"      // no answer within the queue's timeout_ms: retried
	PushConnError   = "connection_error"
	PushCancelled   = "cancelled" // the task was cancelled mid-request
)

// pushMetrics count the requests of push queues (package push).
type pushMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func (m *pushMetrics) register(reg *prometheus.Registry) {
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_push_requests_total",
		Help: "Requests of push queues to their HTTP targets, by outcome (success, rate_limited, server_error, client_error, timeout, connection_error, cancelled)."},
		[]string{"queue", "outcome"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskforge_push_duration_seconds",
		Help: "Duration of push requests, from sending to the end of the answer (or the failure).", Buckets: latencyBuckets},
		[]string{"queue"})
	reg.MustRegister(m.requests, m.duration)
}

// PushRequest counts one push request of queue by its outcome and observes how long it took.
func (t *Telemetry) PushRequest(queue, outcome string, took time.Duration) {
	if t == nil {
		return
	}
	t.push.requests.WithLabelValues(queue, outcome).Inc()
	t.push.duration.WithLabelValues(queue).Observe(took.Seconds())
}
