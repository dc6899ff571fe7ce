// Package view turns storage's rows into the API's objects (package wire, shared
// with the Go SDK). The server's answers, the API's and the dashboard's, are
// built here and never serialise storage's types, so a field added to a row for
// the server's own use cannot leak into an answer.
package view

import (
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/storage"
)

// Task is t as the API shows it.
func Task(t storage.Task) wire.Task {
	return wire.Task{ID: t.ID.String(), Queue: t.Queue, Payload: t.Payload, Priority: t.Priority,
		Status: t.Status, ScheduledAt: t.ScheduledAt, Attempts: t.Attempts, MaxRetries: t.MaxRetries,
		TimeoutSeconds: t.TimeoutSeconds, IdempotencyKey: t.IdempotencyKey, LastError: t.LastError,
		Result: t.Result, ClaimedBy: t.ClaimedBy, HeartbeatAt: t.HeartbeatAt, LeaseExpiresAt: t.LeaseExpiresAt,
		CancelRequested: t.CancelRequested, ReplayedFrom: UUIDText(t.ReplayedFrom), ReplayCount: t.ReplayCount,
		ReplayedAt: t.ReplayedAt, Releases: t.Releases, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
		FinishedAt: t.FinishedAt, Progress: t.Progress, Schedule: t.Schedule,
		WorkflowID: UUIDText(t.WorkflowID), Step: t.Step, DebounceKey: t.DebounceKey, Debounced: t.Debounced,
		Group: t.Group}
}

// Tasks is tasks as the API shows them; never nil, so that an empty list is [].
func Tasks(tasks []storage.Task) []wire.Task {
	out := make([]wire.Task, len(tasks))
	for i, t := range tasks {
		out[i] = Task(t)
	}
	return out
}

// TaskWithHistory is t with its attempts, as GET /queues/:name/tasks/:id shows it:
// attempt_history is [] when there are none.
func TaskWithHistory(t storage.Task, attempts []storage.Attempt) wire.Task {
	v := Task(t)
	v.AttemptHistory = make([]wire.Attempt, len(attempts))
	for i, a := range attempts {
		v.AttemptHistory[i] = wire.Attempt{Attempt: a.Attempt, WorkerID: a.WorkerID, Status: a.Status,
			StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Error: a.Error}
	}
	return v
}

// PolledTask is t as a poll hands it to a worker, with the heartbeat interval
// the server wants.
func PolledTask(t storage.Task, heartbeatIntervalMs int64) wire.PolledTask {
	return wire.PolledTask{ID: t.ID.String(), Queue: t.Queue, Payload: t.Payload, Priority: t.Priority,
		Attempt: t.Attempts, LeaseToken: t.LeaseToken.String(), LeaseExpiresAt: *t.LeaseExpiresAt,
		HeartbeatIntervalMs: heartbeatIntervalMs, TimeoutSeconds: t.TimeoutSeconds,
		Traceparent: t.Traceparent, WorkflowID: UUIDText(t.WorkflowID), Step: t.Step, Group: t.Group}
}

// UUIDText is id in its canonical text form, nil when id is.
func UUIDText(id *uuid.UUID) *string {
	if id == nil {
		return nil
	}
	s := id.String()
	return &s
}

// Workflow is w as the API shows it.
func Workflow(w storage.Workflow) wire.Workflow {
	out := wire.Workflow{ID: w.ID.String(), Name: w.Name, Status: w.Status, IdempotencyKey: w.IdempotencyKey,
		CreatedAt: w.CreatedAt, FinishedAt: w.FinishedAt}
	if w.Steps != nil {
		out.Steps = make([]wire.WorkflowStep, len(w.Steps))
	}
	for i, st := range w.Steps {
		out.Steps[i] = wire.WorkflowStep{Step: st.Step, Queue: st.Queue, TaskID: st.TaskID.String(),
			Status: st.Status, DependsOn: st.DependsOn, Attempts: st.Attempts, Result: st.Result,
			LastError: st.LastError}
	}
	return out
}

// Workflows is workflows as the API shows them; never nil.
func Workflows(workflows []storage.Workflow) []wire.Workflow {
	out := make([]wire.Workflow, len(workflows))
	for i, w := range workflows {
		out[i] = Workflow(w)
	}
	return out
}
