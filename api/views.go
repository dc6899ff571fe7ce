package api

import (
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/storage"
)

// The API answers with the types of package wire, shared with the Go SDK and the
// tests, never with storage's rows: a field added to storage.Task for the server's
// own use cannot leak into the API, and the JSON the SDK decodes is the JSON the
// server encodes (api/openapi.yaml is the contract both follow).

// errorDetail is the inside of an error body, and the error of one batch item.
type errorDetail = wire.ErrorDetail

// taskView is t as the API shows it.
func taskView(t storage.Task) wire.Task {
	return wire.Task{ID: t.ID.String(), Queue: t.Queue, Payload: t.Payload, Priority: t.Priority,
		Status: t.Status, ScheduledAt: t.ScheduledAt, Attempts: t.Attempts, MaxRetries: t.MaxRetries,
		TimeoutSeconds: t.TimeoutSeconds, IdempotencyKey: t.IdempotencyKey, LastError: t.LastError,
		Result: t.Result, ClaimedBy: t.ClaimedBy, HeartbeatAt: t.HeartbeatAt, LeaseExpiresAt: t.LeaseExpiresAt,
		CancelRequested: t.CancelRequested, ReplayedFrom: uuidText(t.ReplayedFrom), ReplayCount: t.ReplayCount,
		ReplayedAt: t.ReplayedAt, Releases: t.Releases, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
		FinishedAt: t.FinishedAt, Progress: t.Progress, Schedule: t.Schedule,
		WorkflowID: uuidText(t.WorkflowID), Step: t.Step}
}

// taskViews is tasks as the API shows them; never nil, so that an empty list is [].
func taskViews(tasks []storage.Task) []wire.Task {
	out := make([]wire.Task, len(tasks))
	for i, t := range tasks {
		out[i] = taskView(t)
	}
	return out
}

// taskWithHistory is t with its attempts, as GET /queues/:name/tasks/:id shows it:
// attempt_history is [] when there are none.
func taskWithHistory(t storage.Task, attempts []storage.Attempt) wire.Task {
	v := taskView(t)
	v.AttemptHistory = make([]wire.Attempt, len(attempts))
	for i, a := range attempts {
		v.AttemptHistory[i] = wire.Attempt{Attempt: a.Attempt, WorkerID: a.WorkerID, Status: a.Status,
			StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Error: a.Error}
	}
	return v
}

// polledTaskView is t as a poll hands it to a worker, with the heartbeat interval
// the server wants.
func polledTaskView(t storage.Task, heartbeatIntervalMs int64) wire.PolledTask {
	return wire.PolledTask{ID: t.ID.String(), Queue: t.Queue, Payload: t.Payload, Priority: t.Priority,
		Attempt: t.Attempts, LeaseToken: t.LeaseToken.String(), LeaseExpiresAt: *t.LeaseExpiresAt,
		HeartbeatIntervalMs: heartbeatIntervalMs, TimeoutSeconds: t.TimeoutSeconds,
		Traceparent: t.Traceparent, WorkflowID: uuidText(t.WorkflowID), Step: t.Step}
}

// uuidText is id in its canonical text form, nil when id is.
func uuidText(id *uuid.UUID) *string {
	if id == nil {
		return nil
	}
	s := id.String()
	return &s
}

// parseLease parses the task id and lease token of item i of a batch (what names
// it in the error: "acks[3]"), both required.
func parseLease(item, taskID, leaseToken string) (uuid.UUID, uuid.UUID, error) {
	if taskID == "" || leaseToken == "" {
		return uuid.Nil, uuid.Nil, invalid("%s: task_id and lease_token are required", item)
	}
	id, errID := uuid.Parse(taskID)
	token, errToken := uuid.Parse(leaseToken)
	if errID != nil || errToken != nil {
		return uuid.Nil, uuid.Nil, invalid("%s: task_id and lease_token must be UUIDs", item)
	}
	return id, token, nil
}
