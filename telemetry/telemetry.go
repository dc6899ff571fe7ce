// Package telemetry is how TaskForge reports what it does: Prometheus metrics, one
// structured log line per task state transition, request metrics and logs, and
// OpenTelemetry spans that join each task's steps to its producer's trace.
//
// Components report events (a transition, a reclaim, a limited poll) and never
// compute metrics themselves. A nil *Telemetry accepts every call and does nothing,
// so components work without it. Gauges that need PostgreSQL or Redis are computed by
// StateCollector at scrape time from a short cache, never on the request path.
//
// With several replicas, counters and histograms are per process (sum them); gauges
// read the shared PostgreSQL and Redis, so every replica reports the same value
// (aggregate them with max, not sum).
package telemetry

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
)

// Telemetry holds one replica's metrics and its transition logger.
type Telemetry struct {
	log    *slog.Logger
	reg    *prometheus.Registry
	tracer trace.Tracer // nil: no spans

	enqueued        *prometheus.CounterVec
	completed       *prometheus.CounterVec
	retries         *prometheus.CounterVec
	releases        *prometheus.CounterVec
	dispatched      *prometheus.CounterVec
	reclaims        *prometheus.CounterVec
	limitedPolls    *prometheus.CounterVec
	groupThrottled  *prometheus.CounterVec
	execDuration    *prometheus.HistogramVec
	dispatchLatency *prometheus.HistogramVec
	claimDuration   prometheus.Histogram
	commitFailures  *prometheus.CounterVec
	httpRequests    *prometheus.CounterVec
	httpDuration    *prometheus.HistogramVec
	scheduleRuns    *prometheus.CounterVec
	scheduleLate    prometheus.Histogram
	workflows       *prometheus.CounterVec
	push            pushMetrics      // push.go
	retention       retentionMetrics // retention.go
}

// latencyBuckets span 1 ms to ~65 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)

// New returns a Telemetry with its own registry (Go and process collectors included),
// logging transitions to log.
func New(log *slog.Logger) *Telemetry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	t := &Telemetry{log: log, reg: reg}
	t.enqueued = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_tasks_enqueued_total",
		Help: "Tasks created, by enqueue or replay."}, []string{"queue"})
	t.completed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_tasks_completed_total",
		Help: "Tasks that reached a terminal status (done, dead, cancelled)."}, []string{"queue", "status"})
	t.retries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_task_retries_total",
		Help: "Failed attempts followed by a retry."}, []string{"queue"})
	t.releases = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_task_releases_total",
		Help: "Attempts a stopping worker handed back; they do not spend the retry budget."}, []string{"queue"})
	t.dispatched = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_tasks_dispatched_total",
		Help: "Tasks mirrored into the Redis buffer."}, []string{"queue"})
	t.reclaims = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_watchdog_reclaims_total",
		Help: "Attempts the watchdog ended, by reason (abandoned, timed_out, cancelled)."}, []string{"queue", "reason"})
	t.limitedPolls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_limited_polls_total",
		Help: "Polls of a queue that flow control held back, by reason (rate, concurrency, paused)."}, []string{"queue", "reason"})
	t.groupThrottled = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_group_throttled_total",
		Help: "Groups of a fair queue that a pop set aside, by reason: at their concurrency cap (cap) or out of tokens (rate)."},
		[]string{"queue", "reason"})
	t.execDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskforge_task_execution_duration_seconds",
		Help: "Duration of finished attempts, from claim to ack, nack or reclaim.", Buckets: latencyBuckets}, []string{"queue"})
	t.dispatchLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskforge_dispatch_latency_seconds",
		Help: "Time from a task becoming eligible to a worker claiming it.", Buckets: latencyBuckets}, []string{"queue"})
	t.claimDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "taskforge_claim_duration_seconds",
		Help: "Duration of one claim statement in PostgreSQL.", Buckets: latencyBuckets})
	t.commitFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_group_commit_failures_total",
		Help: "Group commits (of acks, or of polls' claims) that failed their callers, by reason (timeout, overload, panic)."},
		[]string{"commit", "reason"})
	t.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_http_requests_total",
		Help: "HTTP requests by route, method and status code."}, []string{"route", "method", "code"})
	t.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskforge_http_request_duration_seconds",
		Help: "HTTP request duration by route (poll includes its long-poll wait).", Buckets: latencyBuckets}, []string{"route", "method"})
	t.scheduleRuns = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_schedule_runs_total",
		Help: "Ticks of a schedule fired (one task each), by schedule."}, []string{"schedule"})
	t.scheduleLate = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "taskforge_schedule_lateness_seconds",
		Help: "Time from a schedule's tick to the commit of its task, on the database clock.", Buckets: latencyBuckets})
	t.workflows = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskforge_workflows_total",
		Help: "Workflow transitions this replica made: submitted, resumed (a dead step replayed), and the ends succeeded, failed and cancelled, whether made by a request or inside a step's statement."}, []string{"event"})
	for _, c := range []prometheus.Collector{t.workflows, t.enqueued, t.completed, t.retries, t.releases, t.dispatched, t.reclaims,
		t.limitedPolls, t.groupThrottled, t.execDuration, t.dispatchLatency, t.claimDuration, t.commitFailures, t.httpRequests, t.httpDuration,
		t.scheduleRuns, t.scheduleLate} {
		f(c)
	}
	t.push.register(reg)
	t.retention.register(reg)
	return t
}

// Registry returns the registry, to add collectors to.
func (t *Telemetry) Registry() *prometheus.Registry { return t.reg }

// Handler serves the metrics in the Prometheus text format.
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{Registry: t.reg})
}

// Transition is one change of a task's status.
type Transition struct {
	TaskID   uuid.UUID
	Queue    string
	WorkerID string // the worker involved, if any
	From     string // "" for a new task
	To       string
	Attempt  int
	// Duration is the attempt's duration when the transition ends one, else zero.
	Duration time.Duration
	// Eligible is when the task became eligible, for transitions to executing.
	Eligible time.Time
	Reason   string // why, when it is not the worker's word (e.g. abandoned, timed_out)
	// WorkflowID and Step name the workflow step the task runs; zero for plain tasks.
	WorkflowID uuid.UUID
	Step       string
}

// Transition logs one transition and counts it.
func (t *Telemetry) Transition(tr Transition) {
	if t == nil {
		return
	}
	switch tr.To {
	case "pending":
		switch tr.From {
		case "":
			t.enqueued.WithLabelValues(tr.Queue).Inc()
		case "executing":
			t.releases.WithLabelValues(tr.Queue).Inc()
		}
	case "claimed": // buffered: the status string of a task dispatched into Redis
		t.dispatched.WithLabelValues(tr.Queue).Inc()
	case "executing":
		if !tr.Eligible.IsZero() {
			t.dispatchLatency.WithLabelValues(tr.Queue).Observe(max(0, time.Since(tr.Eligible).Seconds()))
		}
	case "retry":
		t.retries.WithLabelValues(tr.Queue).Inc()
	case "done", "dead", "cancelled":
		t.completed.WithLabelValues(tr.Queue, tr.To).Inc()
	}
	if tr.From == "executing" && tr.Duration > 0 {
		t.execDuration.WithLabelValues(tr.Queue).Observe(tr.Duration.Seconds())
	}
	if ctx := context.Background(); t.log.Enabled(ctx, slog.LevelInfo) {
		attrs := []slog.Attr{
			slog.String("task_id", tr.TaskID.String()), slog.String("queue", tr.Queue),
			slog.String("worker_id", tr.WorkerID), slog.String("from_status", tr.From),
			slog.String("to_status", tr.To), slog.Int("attempt", tr.Attempt),
			slog.Int64("duration_ms", tr.Duration.Milliseconds()),
		}
		if tr.Reason != "" {
			attrs = append(attrs, slog.String("reason", tr.Reason))
		}
		if tr.WorkflowID != uuid.Nil {
			attrs = append(attrs, slog.String("workflow_id", tr.WorkflowID.String()), slog.String("step", tr.Step))
		}
		t.log.LogAttrs(ctx, slog.LevelInfo, "task transition", attrs...)
	}
}

// Workflow counts a workflow event in taskforge_workflows_total without logging it;
// WorkflowTransition is the usual way to report one.
func (t *Telemetry) Workflow(event string) {
	if t == nil {
		return
	}
	t.workflows.WithLabelValues(event).Inc()
}

// WorkflowChange is a change of a workflow's status: its submission (From ""), its
// end (To succeeded, failed or cancelled), or its resumption (failed → running).
type WorkflowChange struct {
	WorkflowID uuid.UUID
	From       string // "" for a new workflow
	To         string
	// TaskID, Queue and Step name the step whose task's transition made the change
	// (an ack, a death, a cancel, a replay); zero when none did (a submission, a
	// cancel of the whole workflow).
	TaskID uuid.UUID
	Queue  string
	Step   string
	Reason string
}

// WorkflowTransition logs a workflow's change of status (one "workflow transition"
// line at info level) and counts it in taskforge_workflows_total: event "submitted"
// for a new workflow, "resumed" for one running again, else its final status.
func (t *Telemetry) WorkflowTransition(c WorkflowChange) {
	if t == nil {
		return
	}
	event := c.To
	if c.To == "running" {
		event = "submitted"
		if c.From != "" {
			event = "resumed"
		}
	}
	t.workflows.WithLabelValues(event).Inc()
	if ctx := context.Background(); t.log.Enabled(ctx, slog.LevelInfo) {
		attrs := []slog.Attr{slog.String("workflow_id", c.WorkflowID.String()),
			slog.String("from_status", c.From), slog.String("to_status", c.To)}
		if c.TaskID != uuid.Nil {
			attrs = append(attrs, slog.String("task_id", c.TaskID.String()), slog.String("queue", c.Queue),
				slog.String("step", c.Step))
		}
		if c.Reason != "" {
			attrs = append(attrs, slog.String("reason", c.Reason))
		}
		t.log.LogAttrs(ctx, slog.LevelInfo, "workflow transition", attrs...)
	}
}

// Reclaimed counts a watchdog reclaim by its reason.
func (t *Telemetry) Reclaimed(queue, reason string) {
	if t == nil {
		return
	}
	t.reclaims.WithLabelValues(queue, reason).Inc()
}

// LimitedPoll counts a poll of queue that flow control held back.
func (t *Telemetry) LimitedPoll(queue, reason string) {
	if t == nil {
		return
	}
	t.limitedPolls.WithLabelValues(queue, reason).Inc()
}

// GroupThrottled counts the groups of fair queue that one pop set aside at their cap
// and out of tokens (taskforge_group_throttled_total).
func (t *Telemetry) GroupThrottled(queue string, atCap, outOfTokens int) {
	if t == nil {
		return
	}
	if atCap > 0 {
		t.groupThrottled.WithLabelValues(queue, "cap").Add(float64(atCap))
	}
	if outOfTokens > 0 {
		t.groupThrottled.WithLabelValues(queue, "rate").Add(float64(outOfTokens))
	}
}

// ObserveClaim records how long one claim statement took.
func (t *Telemetry) ObserveClaim(d time.Duration) {
	if t == nil {
		return
	}
	t.claimDuration.Observe(d.Seconds())
}

// GroupCommitFailed counts a group commit ("ack" or "claim") that failed its callers:
// reason "timeout" (a try passed its deadline), "overload" (too many waiting; counted
// per refused request) or "panic".
func (t *Telemetry) GroupCommitFailed(commit, reason string) {
	if t == nil {
		return
	}
	t.commitFailures.WithLabelValues(commit, reason).Inc()
}
