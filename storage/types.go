package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Task statuses.
const (
	StatusPending = "pending"
	// StatusBlocked: a workflow step waiting for the steps it depends on; never
	// dispatched, it becomes pending when the last of them is done.
	StatusBlocked = "blocked"
	// StatusBuffered: dispatched into the Redis buffer, waiting for a worker's
	// poll. The API and the database call it "claimed" (a public status string,
	// kept); code says buffered, and keeps "claim" for a worker taking a task
	// (buffered → executing).
	StatusBuffered  = "claimed"
	StatusExecuting = "executing"
	StatusRetry     = "retry"
	StatusDone      = "done"
	StatusDead      = "dead"
	StatusCancelled = "cancelled"
)

// Statuses lists every task status, in lifecycle order.
var Statuses = []string{StatusPending, StatusBlocked, StatusBuffered, StatusExecuting, StatusRetry, StatusDone, StatusDead, StatusCancelled}

// Attempt outcomes.
const (
	AttemptExecuting = "executing"
	AttemptSucceeded = "succeeded"
	AttemptFailed    = "failed"
	AttemptAbandoned = "abandoned"
	AttemptTimedOut  = "timed_out"
	AttemptCancelled = "cancelled"
	// AttemptReleased: a stopping worker handed the task back; not a failure.
	AttemptReleased = "released"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	ErrQueueNotFound       = errors.New("queue not found")
	ErrQueueExists         = errors.New("queue already exists")
	ErrQueueNotEmpty       = errors.New("queue holds unfinished or dead tasks")
	ErrTaskNotFound        = errors.New("task not found")
	ErrTaskNotCancellable  = errors.New("task already finished")
	ErrLeaseLost           = errors.New("lease is not held")
	ErrIdempotencyConflict = errors.New("idempotency key already used by a different request")
	// ErrDuplicateRequest: the idempotency key's task is gone, but the queue's
	// idempotency window still holds the key (see DuplicateRequestError).
	ErrDuplicateRequest = errors.New("idempotency key held by a deleted task within the queue's window")
	ErrScheduleNotFound = errors.New("schedule not found")
	ErrScheduleExists   = errors.New("schedule already exists")
	ErrWorkflowNotFound = errors.New("workflow not found")
	// ErrGroupNotFound: the group has no tasks (unfinished or dead) and no overrides.
	ErrGroupNotFound = errors.New("group not found")
	// ErrWorkflowNotCancellable: the workflow already finished.
	ErrWorkflowNotCancellable = errors.New("workflow already finished")
)

// IdempotencyConflictError says which task of a batch reused a key with a different request.
type IdempotencyConflictError struct {
	Index int    // position in the batch
	Key   string // the idempotency key
}

func (e *IdempotencyConflictError) Error() string {
	return fmt.Sprintf("task %d: idempotency key %q already used by a different request", e.Index, e.Key)
}

// Is makes errors.Is(err, ErrIdempotencyConflict) true.
func (e *IdempotencyConflictError) Is(target error) bool { return target == ErrIdempotencyConflict }

// Queue is a named stream of tasks with its retry and flow-control settings.
type Queue struct {
	Name           string   `json:"name" db:"name"`
	MaxRetries     int      `json:"max_retries" db:"max_retries"`
	RateLimit      *float64 `json:"rate_limit" db:"rate_limit"`
	RateBurst      *int     `json:"rate_burst" db:"rate_burst"`
	MaxConcurrency *int     `json:"max_concurrency" db:"max_concurrency"`
	BackoffBaseMs  int64    `json:"backoff_base_ms" db:"backoff_base_ms"`
	BackoffMaxMs   int64    `json:"backoff_max_ms" db:"backoff_max_ms"`
	Paused         bool     `json:"paused" db:"paused"`
	// PriorityAgingMs, when set, makes each priority level worth that much waiting
	// time, so old low-priority tasks are eventually served before new high ones.
	PriorityAgingMs *int64 `json:"priority_aging_ms" db:"priority_aging_ms"`
	// Push, when set, makes this a push queue: its tasks are POSTed to an HTTP
	// target (package push) and polls naming it are refused.
	Push *PushTarget `json:"push" db:"push"`
	// PushSecret is the push target's signing secret as stored: sealed when
	// encryption at rest is on. It is never shown; see Store.PushQueues.
	PushSecret *string `json:"-" db:"push_secret"`
	// RetentionSet is the retention the queue sets itself, as stored (see
	// RetentionSettings); what it leaves out follows the Store's defaults.
	RetentionSet RetentionSettings `json:"-" db:"retention"`
	// Retention is the queue's effective retention: RetentionSet with the Store's
	// defaults (WithRetentionDefaults) filled in. Every read of the Store fills it;
	// writes store RetentionSet only.
	Retention Retention `json:"retention" db:"-"`
	// IdempotencyWindowMs is how long an idempotency key stays reserved after its
	// task's creation, even once the task is deleted (0 to 30 days; nil on create:
	// 24 h). Reads always set it.
	IdempotencyWindowMs *int64 `json:"idempotency_window_ms" db:"idempotency_window_ms"`
	// Fairness, when FairnessRoundRobin, makes the groups of the queue's tasks take
	// weighted turns within each priority level; nil keeps one line by priority,
	// then eligible time.
	Fairness *string `json:"fairness" db:"fairness"`
	// GroupMaxConcurrency caps the executing tasks of each group; GroupRateLimit
	// (tasks/s) and GroupRateBurst make a token bucket per group. nil = off; a
	// group's overrides (QueueGroup) take precedence.
	GroupMaxConcurrency *int      `json:"group_max_concurrency" db:"group_max_concurrency"`
	GroupRateLimit      *float64  `json:"group_rate_limit" db:"group_rate_limit"`
	GroupRateBurst      *int      `json:"group_rate_burst" db:"group_rate_burst"`
	CreatedAt           time.Time `json:"created_at" db:"created_at"`
	UpdatedAt           time.Time `json:"updated_at" db:"updated_at"`
}

// FairnessRoundRobin is the fairness of a queue whose groups take turns.
const FairnessRoundRobin = "round_robin"

// MaxGroupLen is the longest group name.
const MaxGroupLen = 200

// ValidGroupName reports whether name may name a group: 1..MaxGroupLen characters
// of [A-Za-z0-9._:@-].
func ValidGroupName(name string) bool {
	if name == "" || len(name) > MaxGroupLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '@' || c == '-') {
			return false
		}
	}
	return true
}

// PushTarget is where a push queue delivers its tasks. Its JSON form is the API's
// (the secret is write-only: SecretSet says whether requests are signed).
type PushTarget struct {
	URL       string            `json:"url"`
	TimeoutMs int               `json:"timeout_ms"`
	Headers   map[string]string `json:"headers"`
	SecretSet bool              `json:"secret_set"`
}

// Task is one unit of work and its current state. Its JSON form is the API's task object.
type Task struct {
	ID              uuid.UUID       `json:"id" db:"id"`
	Queue           string          `json:"queue" db:"queue"`
	Payload         json.RawMessage `json:"payload" db:"payload"`
	Priority        int             `json:"priority" db:"priority"`
	Status          string          `json:"status" db:"status"`
	ScheduledAt     time.Time       `json:"scheduled_at" db:"scheduled_at"`
	Attempts        int             `json:"attempts" db:"attempts"`
	MaxRetries      int             `json:"max_retries" db:"max_retries"`
	TimeoutSeconds  *int            `json:"timeout_seconds" db:"timeout_seconds"`
	IdempotencyKey  *string         `json:"idempotency_key" db:"idempotency_key"`
	Fingerprint     []byte          `json:"-" db:"fingerprint"`
	LastError       *string         `json:"last_error" db:"last_error"`
	Result          json.RawMessage `json:"result" db:"result"`
	ClaimedBy       *string         `json:"claimed_by" db:"claimed_by"`
	LeaseToken      *uuid.UUID      `json:"-" db:"lease_token"`
	HeartbeatAt     *time.Time      `json:"heartbeat_at" db:"heartbeat_at"`
	LeaseExpiresAt  *time.Time      `json:"lease_expires_at" db:"lease_expires_at"`
	CancelRequested bool            `json:"cancel_requested" db:"cancel_requested"`
	ReplayedFrom    *uuid.UUID      `json:"replayed_from" db:"replayed_from"`
	ReplayCount     int             `json:"replay_count" db:"replay_count"`
	ReplayedAt      *time.Time      `json:"replayed_at" db:"replayed_at"`
	// AttemptStartedAt is when the current (or last) attempt started.
	AttemptStartedAt *time.Time `json:"-" db:"attempt_started_at"`
	// Traceparent is the W3C trace context of the enqueue, if the producer sent one.
	Traceparent *string `json:"-" db:"traceparent"`
	// Releases counts attempts a stopping worker handed back (POST /workers/release);
	// they do not count against the retry budget, which is Attempts - Releases.
	Releases   int        `json:"releases" db:"releases"`
	CreatedAt  time.Time  `json:"created_at" db:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at" db:"updated_at"`
	FinishedAt *time.Time `json:"finished_at" db:"finished_at"`

	// Progress is the last progress a worker reported with a heartbeat of the
	// current (or last) attempt: null until one is reported, and again from the
	// claim of the next attempt.
	Progress json.RawMessage `json:"progress" db:"progress"`
	// Schedule names the schedule whose tick (or trigger) created the task; nil for
	// tasks enqueued directly.
	Schedule *string `json:"schedule" db:"schedule"`
	// WorkflowID and Step name the workflow step the task runs; nil for plain tasks.
	WorkflowID *uuid.UUID `json:"workflow_id" db:"workflow_id"`
	Step       *string    `json:"step" db:"step"`
	// DebounceKey is the debounce key the task was enqueued with, if any; Debounced
	// counts the enqueues with that key that replaced it while it waited.
	DebounceKey *string `json:"debounce_key" db:"debounce_key"`
	Debounced   int     `json:"debounced" db:"debounced"`
	// Group names the task's group in a fair queue (a tenant, a customer…); nil is
	// the queue's unnamed group. It never changes after the enqueue, except when a
	// debounce replaces the waiting task.
	Group *string `json:"group" db:"group_key"`
	// Effects is what the statement that ended this task (ack, nack, release,
	// cancel) did to the rest of its workflow in the same transaction; nil when it
	// did nothing more, and always for plain tasks and for reads.
	Effects *StepEffects `json:"-" db:"-"`
}

// StepEffects is what the end of one workflow step's task did to its workflow inside
// the statement that ended it: the steps it unblocked, the steps its failure cascade
// cancelled, and the workflow's end. Each effect is reported once, with the row of
// one task of the statement: a step unblocked by two parents acked together comes
// with the first of them in id order, and a workflow that ends with several steps
// of one batch comes with one of them.
type StepEffects struct {
	// WorkflowEnded is the status the workflow ended with (WorkflowSucceeded,
	// WorkflowFailed or WorkflowCancelled); "" when it runs on.
	WorkflowEnded string `json:"workflow_ended"`
	// Unblocked are the steps the ack moved from blocked to pending.
	Unblocked []UnblockedStep `json:"unblocked"`
	// Cascaded are the other unfinished steps the failure cascade changed: cancelled,
	// or (FromStatus executing) flagged cancel_requested and still running.
	Cascaded []CancelledStep `json:"cascaded"`
}

// UnblockedStep is a workflow step's task an ack moved from blocked to pending.
type UnblockedStep struct {
	ID    uuid.UUID `json:"id"`
	Queue string    `json:"queue"`
	Step  string    `json:"step"`
}

// Attempt is one execution of a task by a worker.
type Attempt struct {
	Attempt    int        `json:"attempt" db:"attempt"`
	WorkerID   string     `json:"worker_id" db:"worker_id"`
	Status     string     `json:"status" db:"status"`
	StartedAt  time.Time  `json:"started_at" db:"started_at"`
	FinishedAt *time.Time `json:"finished_at" db:"finished_at"`
	Error      *string    `json:"error" db:"error"`
}

// NewTask is one task to enqueue. Nil fields take the queue's defaults.
type NewTask struct {
	ID             uuid.UUID
	Payload        json.RawMessage
	Priority       int
	ScheduledAt    *time.Time
	MaxRetries     *int
	TimeoutSeconds *int
	IdempotencyKey *string
	Fingerprint    []byte // required when IdempotencyKey is set
	// DebounceKey, when set, makes the enqueue replace the queue's waiting task
	// with that key, if any (see Store.EnqueueWith), and puts the task due
	// DebounceMs from now, never later than DebounceMaxMs (when set) from the
	// first enqueue of the task it replaces. ScheduledAt and IdempotencyKey must
	// then be nil, and DebounceMs ≥ 1.
	DebounceKey   *string
	DebounceMs    int64
	DebounceMaxMs *int64
	// Group names the task's group (ValidGroupName); nil = the queue's unnamed group.
	Group *string
}

// Enqueued is the outcome of enqueuing one task.
type Enqueued struct {
	Task    Task
	Created bool // false: an identical earlier request with the same idempotency key, or Replaced
	// Replaced: the enqueue had a debounce key, and replaced the waiting task
	// holding it (Task, with its new fields and Debounced count).
	Replaced bool
}

// TaskFilter selects tasks of one queue for listing. Zero fields match all.
type TaskFilter struct {
	Queue         string
	Status        string
	WorkerID      string
	Group         string // "" = any group
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
	Limit         int
	After         *Cursor // continue after this position
}

// Cursor is a keyset position in a listing.
type Cursor struct {
	Time time.Time
	ID   uuid.UUID
}

// Buffered identifies a task mirrored into (or to be mirrored into) the Redis buffer.
type Buffered struct {
	ID          uuid.UUID `db:"id"`
	Priority    int       `db:"priority"`
	ScheduledAt time.Time `db:"scheduled_at"`
	FromStatus  string    `db:"from_status"` // the status it left (pending or retry)
	Traceparent *string   `db:"traceparent"`
	// Group is the task's group in a fair queue, "" for the unnamed group.
	Group string `db:"group_key"`
}

// GroupSlot names a task of a fair queue with its group ("" = the unnamed group).
type GroupSlot struct {
	Group string
	ID    uuid.UUID
}

// GroupPick asks the dispatch of a fair queue for up to N due tasks of one group at
// one priority level (Store.DueGroups lists the pairs).
type GroupPick struct {
	Priority int
	Group    *string // nil: the unnamed group
	N        int
}

// GroupOverride is one group's overrides of its fair queue's group defaults, as
// stored (nil: the queue's default).
type GroupOverride struct {
	Queue          string   `db:"queue"`
	Group          string   `db:"group_key"`
	Weight         *int     `db:"weight"`
	MaxConcurrency *int     `db:"max_concurrency"`
	RateLimit      *float64 `db:"rate_limit"`
	RateBurst      *int     `db:"rate_burst"`
}

// Nack describes a worker's report that an attempt failed.
type Nack struct {
	TaskID       uuid.UUID
	LeaseToken   uuid.UUID
	WorkerID     string
	Error        string
	Retryable    bool
	RetryAfterMs *int64 // overrides the queue's backoff when set
}

// Release describes a stopping worker handing back a task it will not finish.
type Release struct {
	TaskID     uuid.UUID
	LeaseToken uuid.UUID
	WorkerID   string
	Reason     string
	// DelayMs, when set, snoozes the task: it is due no earlier than DelayMs
	// milliseconds from now, on the database clock. Nil keeps its place in line.
	DelayMs *int64
}

// Lease is the state of a held lease after a heartbeat.
type Lease struct {
	ExpiresAt       time.Time
	CancelRequested bool
}

// Reclaimed is an attempt the watchdog ended.
type Reclaimed struct {
	TaskID   uuid.UUID `db:"id"`
	Queue    string    `db:"queue"`
	Attempt  int       `db:"attempts"`
	WorkerID string    `db:"claimed_by"`
	Status   string    `db:"status"`  // the task's new status: retry, dead or cancelled
	Outcome  string    `db:"outcome"` // the attempt's outcome: abandoned, timed_out or cancelled
	// StartedAt and EndedAt bound the attempt, on the database clock.
	StartedAt time.Time `db:"attempt_started_at"`
	EndedAt   time.Time `db:"updated_at"`
	// WorkflowID and Step name the workflow step the task runs; nil for plain tasks.
	WorkflowID *uuid.UUID `db:"workflow_id"`
	Step       *string    `db:"step"`
	// Effects is what the reclaim did to the rest of the step's workflow (see
	// Task.Effects); nil for plain tasks.
	Effects *StepEffects `db:"wf_effects"`
	// Group is the task's group (nil: the unnamed group), whose slot the attempt held.
	Group *string `db:"group_key"`
}

// Worker is a worker process as last seen.
type Worker struct {
	ID              string      `json:"id" db:"id"`
	Queues          []string    `json:"queues" db:"queues"`
	LastHeartbeatAt time.Time   `json:"last_heartbeat_at" db:"last_heartbeat_at"`
	CurrentTasks    []uuid.UUID `json:"current_tasks" db:"current_tasks"`
	Stale           bool        `json:"stale" db:"stale"`
}

// Stats summarises a queue.
type Stats struct {
	Queue                  string           `json:"queue"`
	Depth                  map[string]int64 `json:"depth"`
	ThroughputPerSec       float64          `json:"throughput_per_sec"`
	ErrorRate              float64          `json:"error_rate"`
	OldestPendingAgeSecond float64          `json:"oldest_pending_age_seconds"`
	DLQDepth               int64            `json:"dlq_depth"`
}
