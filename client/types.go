package client

import (
	"encoding/json"
	"time"
)

// Task statuses (docs/api.md, Tasks).
const (
	StatusPending   = "pending"
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
	Push      *PushTarget `json:"push"`
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
}

// Task is the API's task object. AttemptHistory is filled by GetTask only, and
// DiedAt by ListDead only.
type Task struct {
	ID              string          `json:"id"`
	Queue           string          `json:"queue"`
	Payload         json.RawMessage `json:"payload"`
	Priority        int             `json:"priority"`
	Status          string          `json:"status"`
	ScheduledAt     time.Time       `json:"scheduled_at"`
	Attempts        int             `json:"attempts"`
	MaxRetries      int             `json:"max_retries"`
	TimeoutSeconds  *int            `json:"timeout_seconds"`
	IdempotencyKey  *string         `json:"idempotency_key"`
	LastError       *string         `json:"last_error"`
	Result          json.RawMessage `json:"result"`
	ClaimedBy       *string         `json:"claimed_by"`
	HeartbeatAt     *time.Time      `json:"heartbeat_at"`
	LeaseExpiresAt  *time.Time      `json:"lease_expires_at"`
	CancelRequested bool            `json:"cancel_requested"`
	ReplayedFrom    *string         `json:"replayed_from"`
	ReplayCount     int             `json:"replay_count"`
	ReplayedAt      *time.Time      `json:"replayed_at"`
	// Releases counts attempts handed back by stopping workers; they do not spend
	// the retry budget, so a task runs at most MaxRetries + 1 + Releases times.
	Releases   int        `json:"releases"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at"`
	DiedAt     *time.Time `json:"died_at,omitempty"`
	// WorkflowID and Step name the workflow step the task runs; nil for plain tasks.
	WorkflowID     *string   `json:"workflow_id"`
	Step           *string   `json:"step"`
	AttemptHistory []Attempt `json:"attempt_history,omitempty"`

	// Progress is the last progress the worker reported (Job.Progress) for the
	// current or last attempt; null until one is, and again once the next starts.
	Progress json.RawMessage `json:"progress"`
	// Schedule names the schedule whose tick (or trigger) created the task; nil for
	// tasks enqueued directly.
	Schedule *string `json:"schedule"`
}

// Attempt is one execution of a task, as attempt_history reports it.
type Attempt struct {
	Attempt    int        `json:"attempt"`
	WorkerID   string     `json:"worker_id"`
	Status     string     `json:"status"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	Error      *string    `json:"error"`
}

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
