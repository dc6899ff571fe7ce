// Package wire holds the JSON bodies of TaskForge's HTTP API that more than one
// side encodes or decodes: the task as the API shows it, and the requests and
// answers of the worker protocol (poll, heartbeat, ack, nack, release, and their
// batch forms). The server (package api) encodes its answers and decodes the
// worker protocol's requests with these types, the Go SDK (package client)
// does the reverse, and the server's tests (internal/testserver) read answers
// with them, so the three cannot drift apart. api/openapi.yaml is the contract
// they follow; the server's tests check every request and answer against it.
//
// Ids and lease tokens are UUIDs in their canonical text form, held as strings:
// the package needs nothing beyond the standard library, and a server parses
// them where it checks a request. Optional integers are pointers, so that a
// server can tell an absent field from zero.
package wire

import (
	"encoding/json"
	"time"
)

// Task is the API's task object: what an enqueue, GET /queues/:name/tasks/:id,
// a listing, an ack, a nack, a release, a cancel or a replay answers.
// AttemptHistory is present in a single task's GET only, and DiedAt in the
// dead-letter listing only.
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

	// Progress is the last progress the worker reported for the current or last
	// attempt; null until one is, and again once the next attempt starts.
	Progress json.RawMessage `json:"progress"`
	// Schedule names the schedule whose tick (or trigger) created the task; nil
	// for tasks enqueued directly.
	Schedule *string `json:"schedule"`
	// WorkflowID and Step name the workflow step the task runs; nil for plain tasks.
	WorkflowID *string `json:"workflow_id"`
	Step       *string `json:"step"`
	// DebounceKey is the debounce key the task was enqueued with (nil: none);
	// Debounced counts the later enqueues with that key that replaced it while it
	// waited.
	DebounceKey *string `json:"debounce_key"`
	Debounced   int     `json:"debounced"`
	// Group names the task's group in a fair queue (a tenant, a customer…); nil is
	// the queue's unnamed group.
	Group *string `json:"group"`

	// DiedAt is when a dead task died (the dead-letter listing only; omitted
	// when nil).
	DiedAt *time.Time `json:"died_at,omitzero"`
	// AttemptHistory is every attempt, oldest first (a single task's GET only;
	// omitted when nil, present as [] when the task has no attempt yet).
	AttemptHistory []Attempt `json:"attempt_history,omitzero"`
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

// ErrorDetail is the inside of an error body ({"error": {...}}), and the error of
// one item of a batch's answer.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// TaskID names the task that held the idempotency key of a duplicate_request.
	TaskID string `json:"task_id,omitempty"`
}

// PollRequest is the body of POST /workers/poll.
type PollRequest struct {
	WorkerID string   `json:"worker_id"`
	Queues   []string `json:"queues"`
	// MaxTasks is 1..100; absent means 1.
	MaxTasks *int `json:"max_tasks,omitempty"`
	// WaitMs is how long the server may hold the poll for its first task
	// (0..30000); absent means 0.
	WaitMs *int `json:"wait_ms,omitempty"`
	// Prefetch asks only for tasks of queues without a concurrency cap: tasks the
	// worker will hold until a slot frees. It is PrefetchTasks = MaxTasks, kept
	// for workers that predate PrefetchTasks.
	Prefetch bool `json:"prefetch,omitempty"`
	// PrefetchTasks (0..MaxTasks) is how many of the poll's tasks are prefetch:
	// the first MaxTasks-PrefetchTasks tasks of the answer fill free slots and may
	// come from any queue; the rest only from queues without a concurrency cap
	// (no max_concurrency, no group cap). Absent means 0 (or MaxTasks with Prefetch).
	PrefetchTasks *int `json:"prefetch_tasks,omitempty"`
	// Acks (up to 100) are committed before the poll claims anything. A poll
	// carrying acks does not wait for work.
	Acks []AckItem `json:"acks,omitempty"`
}

// PollResponse is the answer to a poll.
type PollResponse struct {
	Tasks []PolledTask `json:"tasks"`
	// RetryAfterMs, on an empty answer, is when a rate-limited queue that holds
	// waiting work next has a token; omitted when there is none.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
	// Acks are the outcomes of the request's acks, in order (Task is never set
	// here); omitted when the poll carried none.
	Acks []AckResult `json:"acks,omitempty"`
}

// PolledTask is a task a poll hands to a worker, under a lease.
type PolledTask struct {
	ID       string          `json:"id"`
	Queue    string          `json:"queue"`
	Payload  json.RawMessage `json:"payload"`
	Priority int             `json:"priority"`
	// Attempt is the 1-based attempt number: a monotonic fencing token for the
	// worker's own side effects.
	Attempt int `json:"attempt"`
	// LeaseToken identifies this claim; heartbeats, acks and nacks must carry it.
	LeaseToken          string    `json:"lease_token"`
	LeaseExpiresAt      time.Time `json:"lease_expires_at"`
	HeartbeatIntervalMs int64     `json:"heartbeat_interval_ms"`
	TimeoutSeconds      *int      `json:"timeout_seconds"`
	// Traceparent is the W3C trace context of the enqueue, when it had one.
	Traceparent *string `json:"traceparent"`
	// WorkflowID and Step name the workflow step the task runs; nil for plain tasks.
	WorkflowID *string `json:"workflow_id"`
	Step       *string `json:"step"`
	// Group names the task's group; nil is the queue's unnamed group.
	Group *string `json:"group"`
}

// AckItem is one ack of POST /workers/ack/batch, or of a poll.
type AckItem struct {
	TaskID     string          `json:"task_id"`
	LeaseToken string          `json:"lease_token"`
	Result     json.RawMessage `json:"result,omitempty"`
}

// TaskRef is a task named by its id alone: an element of the answer to a batch
// enqueue sent with "Prefer: return=minimal".
type TaskRef struct {
	ID string `json:"id"`
}

// EnqueueBatchMinimalResponse is the answer to POST /queues/:name/tasks/batch sent
// with "Prefer: return=minimal": the tasks' ids, in input order.
type EnqueueBatchMinimalResponse struct {
	Tasks []TaskRef `json:"tasks"`
}

// AckBatchRequest is the body of POST /workers/ack/batch.
type AckBatchRequest struct {
	WorkerID string    `json:"worker_id"`
	Acks     []AckItem `json:"acks"`
}

// AckBatchResponse is the answer to POST /workers/ack/batch.
type AckBatchResponse struct {
	Results []AckResult `json:"results"`
}

// AckResult is the outcome of one ack of a batch or a poll: no Error means
// acked. A batch's answer carries the done Task, unless it was asked for with
// "Prefer: return=minimal"; a poll's does not.
type AckResult struct {
	TaskID string       `json:"task_id"`
	Task   *Task        `json:"task,omitempty"`
	Error  *ErrorDetail `json:"error,omitempty"`
}

// LeaseRequest names a worker and, optionally, one lease it holds: the fields
// POST /workers/heartbeat, /ack, /nack and /release share.
type LeaseRequest struct {
	WorkerID   string `json:"worker_id"`
	TaskID     string `json:"task_id,omitempty"`
	LeaseToken string `json:"lease_token,omitempty"`
}

// HeartbeatRequest is the body of POST /workers/heartbeat. Without a task it
// only records the worker as alive.
type HeartbeatRequest struct {
	LeaseRequest
	// Progress, when present, replaces the attempt's progress; JSON null clears it.
	Progress json.RawMessage `json:"progress,omitempty"`
}

// HeartbeatResponse is the answer to a heartbeat; LeaseExpiresAt is null for a
// heartbeat without a task.
type HeartbeatResponse struct {
	LeaseExpiresAt  *time.Time `json:"lease_expires_at"`
	CancelRequested bool       `json:"cancel_requested"`
}

// LeaseRef names one lease of a batch heartbeat.
type LeaseRef struct {
	TaskID     string `json:"task_id"`
	LeaseToken string `json:"lease_token"`
}

// HeartbeatBatchRequest is the body of POST /workers/heartbeat/batch.
type HeartbeatBatchRequest struct {
	WorkerID string     `json:"worker_id"`
	Leases   []LeaseRef `json:"leases"`
}

// HeartbeatBatchResponse is the answer to POST /workers/heartbeat/batch.
type HeartbeatBatchResponse struct {
	Leases []LeaseResult `json:"leases"`
}

// LeaseResult is one lease of a batch heartbeat's answer: the extended lease, or
// the Error the single heartbeat would have returned.
type LeaseResult struct {
	TaskID          string       `json:"task_id"`
	LeaseExpiresAt  *time.Time   `json:"lease_expires_at,omitempty"`
	CancelRequested *bool        `json:"cancel_requested,omitempty"`
	Error           *ErrorDetail `json:"error,omitempty"`
}

// AckRequest is the body of POST /workers/ack; the answer is the done Task.
type AckRequest struct {
	LeaseRequest
	Result json.RawMessage `json:"result,omitempty"`
}

// NackRequest is the body of POST /workers/nack; the answer is the Task.
type NackRequest struct {
	LeaseRequest
	Error string `json:"error"`
	// Retryable false sends the task to the dead-letter queue; absent means true.
	Retryable *bool `json:"retryable,omitempty"`
	// RetryAfterMs, when present, replaces the queue's backoff for the next attempt.
	RetryAfterMs *int64 `json:"retry_after_ms,omitempty"`
}

// ReleaseRequest is the body of POST /workers/release; the answer is the Task.
type ReleaseRequest struct {
	LeaseRequest
	Reason string `json:"reason"`
	// DelayMs, when present, snoozes the task: it is due again after this delay.
	DelayMs *int64 `json:"delay_ms,omitempty"`
}

// Workflow is the API's workflow object (GET /workflows/:id): a DAG of steps, each
// a task, with its state.
type Workflow struct {
	ID             string         `json:"id"`
	Name           *string        `json:"name"`
	Status         string         `json:"status"` // running, succeeded, failed or cancelled
	IdempotencyKey *string        `json:"idempotency_key"`
	CreatedAt      time.Time      `json:"created_at"`
	FinishedAt     *time.Time     `json:"finished_at"`
	Steps          []WorkflowStep `json:"steps"` // in the order submitted
}

// Step returns the step named name, or nil.
func (w *Workflow) Step(name string) *WorkflowStep {
	for i := range w.Steps {
		if w.Steps[i].Step == name {
			return &w.Steps[i]
		}
	}
	return nil
}

// WorkflowStep is one step of a Workflow with the state of its current task (a
// resumed step has a new task). The task fields are nil when the task no longer
// exists (a discarded dead step).
type WorkflowStep struct {
	Step      string          `json:"step"`
	Queue     *string         `json:"queue"`
	TaskID    string          `json:"task_id"`
	Status    *string         `json:"status"`
	DependsOn []string        `json:"depends_on"`
	Attempts  *int            `json:"attempts"`
	Result    json.RawMessage `json:"result"`
	LastError *string         `json:"last_error"`
}
