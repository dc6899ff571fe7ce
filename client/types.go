package client

import (
	"time"

	"github.com/taskforge/taskforge/client/wire"
)

// Task statuses (docs/api.md, Tasks).
const (
	StatusPending = "pending"
	// StatusClaimed: dispatched into the server's buffer, waiting for a worker's
	// poll (the server's code calls it buffered).
	StatusClaimed   = "claimed"
	StatusExecuting = "executing"
	StatusRetry     = "retry"
	StatusDone      = "done"
	StatusDead      = "dead"
	StatusCancelled = "cancelled"
)

// Attempt outcomes.
const (
	AttemptExecuting = "executing"
	AttemptSucceeded = "succeeded"
	AttemptFailed    = "failed"
	AttemptAbandoned = "abandoned"
	AttemptTimedOut  = "timed_out"
	AttemptCancelled = "cancelled"
	// AttemptReleased: a stopping worker handed the task back (Client.Release).
	AttemptReleased = "released"
)

// MaxBatch is the most tasks one EnqueueBatch or ReplayDeadTasks call may carry.
const MaxBatch = 1000

// Queue is a queue as the API reports it. RateBurst shows its effective value.
type Queue struct {
	Name           string   `json:"name"`
	MaxRetries     int      `json:"max_retries"`
	RateLimit      *float64 `json:"rate_limit"`      // tasks per second; nil = unlimited
	RateBurst      *int     `json:"rate_burst"`      // nil when RateLimit is nil
	MaxConcurrency *int     `json:"max_concurrency"` // nil = unlimited
	BackoffBaseMs  int64    `json:"backoff_base_ms"`
	BackoffMaxMs   int64    `json:"backoff_max_ms"`
	Paused         bool     `json:"paused"`
	// PriorityAgingMs, when set, makes each priority level worth that much
	// waiting time; nil = strict priority.
	PriorityAgingMs *int64 `json:"priority_aging_ms"`
	// Push is the target of a push queue; nil for a pull queue.
	Push *PushTarget `json:"push"`
	// Retention is how long the queue keeps finished tasks, with the server's
	// defaults filled in for what the queue does not set.
	Retention Retention `json:"retention"`
	// IdempotencyWindowMs is how long an idempotency key stays reserved after its
	// task's creation, even once the task is deleted.
	IdempotencyWindowMs int64 `json:"idempotency_window_ms"`
	// Fairness is "round_robin" when the queue's groups take turns, nil otherwise;
	// the Group fields are the defaults of each group (nil = unlimited).
	Fairness            *string   `json:"fairness"`
	GroupMaxConcurrency *int      `json:"group_max_concurrency"`
	GroupRateLimit      *float64  `json:"group_rate_limit"`
	GroupRateBurst      *int      `json:"group_rate_burst"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
}

// Retention is how long a queue keeps its tasks after they finish, per final
// status, in milliseconds; nil keeps them forever.
type Retention struct {
	DoneMs      *int64 `json:"done_ms"`
	CancelledMs *int64 `json:"cancelled_ms"`
	DeadMs      *int64 `json:"dead_ms"`
}

// Task is the API's task object (package wire, shared with the server).
// AttemptHistory is filled by GetTask only, and DiedAt by ListDead only. Releases
// counts attempts handed back by stopping workers; they do not spend the retry
// budget, so a task runs at most MaxRetries + 1 + Releases times. Progress is the
// last progress the worker reported (Job.Progress) for the current or last
// attempt; null until one is, and again once the next starts.
type Task = wire.Task

// Attempt is one execution of a task, as attempt_history reports it.
type Attempt = wire.Attempt

// Stats summarises a queue (GET /queues/:name/stats).
type Stats struct {
	Queue                   string           `json:"queue"`
	Depth                   map[string]int64 `json:"depth"` // task count by status
	ThroughputPerSec        float64          `json:"throughput_per_sec"`
	ErrorRate               float64          `json:"error_rate"`
	OldestPendingAgeSeconds float64          `json:"oldest_pending_age_seconds"`
	DLQDepth                int64            `json:"dlq_depth"`
}

// WorkerInfo is a worker process as the server last saw it (GET /workers).
type WorkerInfo struct {
	ID              string    `json:"id"`
	Queues          []string  `json:"queues"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
	CurrentTasks    []string  `json:"current_tasks"` // ids of the tasks it is executing
	Stale           bool      `json:"stale"`         // silent for over three heartbeat intervals
}

// TaskPage is one page of a task listing. NextCursor is empty on the last page.
type TaskPage struct {
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"next_cursor"`
}

// Ptr returns a pointer to v, for the optional fields of requests.
func Ptr[T any](v T) *T { return &v }
