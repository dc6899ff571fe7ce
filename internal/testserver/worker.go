package testserver

import (
	"net/http"

	"github.com/taskforge/taskforge/client/wire"
)

// Polled is a task as a worker receives it from a poll.
type Polled = wire.PolledTask

// Task is the API's task object, as tests read it.
type Task = wire.Task

// Attempt is one entry of a task's attempt_history.
type Attempt = wire.Attempt

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
	var out wire.PollResponse
	in.Must(http.StatusOK, "POST", "/workers/poll", wire.PollRequest{
		WorkerID: workerID, Queues: queues, MaxTasks: &maxTasks, WaitMs: &waitMs,
	}).JSON(in.t, &out)
	return out.Tasks
}

// Ack acknowledges p as workerID and returns the response.
func (in *Instance) Ack(workerID string, p Polled) Response {
	return in.Do("POST", "/workers/ack", wire.AckRequest{LeaseRequest: lease(workerID, p)})
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
	return in.Do("POST", "/workers/release", wire.ReleaseRequest{LeaseRequest: lease(workerID, p), Reason: reason})
}

// Heartbeat extends p's lease as workerID and returns the response.
func (in *Instance) Heartbeat(workerID string, p Polled) Response {
	return in.Do("POST", "/workers/heartbeat", wire.HeartbeatRequest{LeaseRequest: lease(workerID, p)})
}

// lease names p's lease, held by workerID.
func lease(workerID string, p Polled) wire.LeaseRequest {
	return wire.LeaseRequest{WorkerID: workerID, TaskID: p.ID, LeaseToken: p.LeaseToken}
}
