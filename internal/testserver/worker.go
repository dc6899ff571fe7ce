package testserver

import (
	"encoding/json"
	"net/http"
	"time"
)

// Polled is a task as a worker receives it from a poll.
type Polled struct {
	ID                  string          `json:"id"`
	Queue               string          `json:"queue"`
	Payload             json.RawMessage `json:"payload"`
	Priority            int             `json:"priority"`
	Attempt             int             `json:"attempt"`
	LeaseToken          string          `json:"lease_token"`
	LeaseExpiresAt      time.Time       `json:"lease_expires_at"`
	HeartbeatIntervalMs int64           `json:"heartbeat_interval_ms"`
	TimeoutSeconds      *int            `json:"timeout_seconds"`
	Traceparent         *string         `json:"traceparent"`
	WorkflowID          *string         `json:"workflow_id"`
	Step                *string         `json:"step"`
}

// Task is the API's task object, as tests read it.
type Task struct {
	ID              string          `json:"id"`
	Queue           string          `json:"queue"`
	Payload         json.RawMessage `json:"payload"`
	Priority        int             `json:"priority"`
	Status          string          `json:"status"`
	ScheduledAt     time.Time       `json:"scheduled_at"`
	Attempts        int             `json:"attempts"`
	MaxRetries      int             `json:"max_retries"`
	LastError       *string         `json:"last_error"`
	Result          json.RawMessage `json:"result"`
	ClaimedBy       *string         `json:"claimed_by"`
	LeaseExpiresAt  *time.Time      `json:"lease_expires_at"`
	CancelRequested bool            `json:"cancel_requested"`
	ReplayedFrom    *string         `json:"replayed_from"`
	ReplayCount     int             `json:"replay_count"`
	ReplayedAt      *time.Time      `json:"replayed_at"`
	Releases        int             `json:"releases"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	FinishedAt      *time.Time      `json:"finished_at"`
	AttemptHistory  []Attempt       `json:"attempt_history"`
	WorkflowID      *string         `json:"workflow_id"`
	Step            *string         `json:"step"`
}

// Attempt is one entry of a task's attempt_history.
type Attempt struct {
	Attempt    int        `json:"attempt"`
	WorkerID   string     `json:"worker_id"`
	Status     string     `json:"status"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	Error      *string    `json:"error"`
}

// CreateQueue creates a queue with the given extra settings.
func (in *Instance) CreateQueue(name string, settings map[string]any) {
	in.t.Helper()
	body := map[string]any{"name": name}
	for k, v := range settings {
		body[k] = v
	}
	in.Must(http.StatusCreated, "POST", "/queues", body)
}

// Enqueue enqueues one task and returns it.
func (in *Instance) Enqueue(queue string, body map[string]any) Task {
	in.t.Helper()
	var t Task
	in.Must(http.StatusCreated, "POST", "/queues/"+queue+"/tasks", body).JSON(in.t, &t)
	return t
}

// Task fetches a task with its attempt history.
func (in *Instance) Task(queue, id string) Task {
	in.t.Helper()
	var t Task
	in.Must(http.StatusOK, "GET", "/queues/"+queue+"/tasks/"+id, nil).JSON(in.t, &t)
	return t
}

// Poll polls once and returns the tasks it got.
func (in *Instance) Poll(workerID string, queues []string, maxTasks, waitMs int) []Polled {
	in.t.Helper()
	var out struct {
		Tasks []Polled `json:"tasks"`
	}
	in.Must(http.StatusOK, "POST", "/workers/poll", map[string]any{
		"worker_id": workerID, "queues": queues, "max_tasks": maxTasks, "wait_ms": waitMs,
	}).JSON(in.t, &out)
	return out.Tasks
}

// Ack acknowledges p as workerID and returns the response.
func (in *Instance) Ack(workerID string, p Polled) Response {
	return in.Do("POST", "/workers/ack", map[string]any{
		"worker_id": workerID, "task_id": p.ID, "lease_token": p.LeaseToken})
}

// Nack reports p failed as workerID, with extra fields (retryable, retry_after_ms).
func (in *Instance) Nack(workerID string, p Polled, errText string, extra map[string]any) Response {
	body := map[string]any{"worker_id": workerID, "task_id": p.ID, "lease_token": p.LeaseToken, "error": errText}
	for k, v := range extra {
		body[k] = v
	}
	return in.Do("POST", "/workers/nack", body)
}

// Release hands p back as workerID, giving reason, and returns the response.
func (in *Instance) Release(workerID string, p Polled, reason string) Response {
	return in.Do("POST", "/workers/release", map[string]any{
		"worker_id": workerID, "task_id": p.ID, "lease_token": p.LeaseToken, "reason": reason})
}

// Heartbeat extends p's lease as workerID and returns the response.
func (in *Instance) Heartbeat(workerID string, p Polled) Response {
	return in.Do("POST", "/workers/heartbeat", map[string]any{
		"worker_id": workerID, "task_id": p.ID, "lease_token": p.LeaseToken})
}
