package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// HandlerFunc processes one task. Returning nil acks it (with the result set by
// Job.SetResult, if any); returning an error nacks it: retried after the queue's
// backoff, unless marked with Permanent (dead-lettered at once) or RetryAfter
// (retried after the given delay). Returning Snooze(d) puts the task back for d
// without spending a retry. A panic is recovered and nacked as a retryable
// error carrying the stack.
//
// ctx is cancelled when the handler should stop: context.Cause(ctx) is
// ErrTaskCancelled (the task was cancelled), ErrLeaseLost (the server no longer
// considers this worker the owner: its work may be repeated elsewhere),
// ErrWorkerStopping (the shutdown grace period ended), or a deadline error when the
// task's timeout_seconds passed. Handlers should watch ctx and return promptly.
type HandlerFunc func(ctx context.Context, job *Job) error

// Job is a task as a handler receives it. Its fields are read-only.
type Job struct {
	ID       string
	Queue    string
	Payload  json.RawMessage
	Priority int
	// Attempt is the 1-based attempt number, also a monotonic fencing token: a
	// later attempt of the same task always carries a larger number.
	Attempt int
	// Timeout is the task's timeout_seconds (zero when it has none); the handler's
	// context ends then.
	Timeout time.Duration
	// WorkerID is the id of the worker running the job.
	WorkerID string
	// Traceparent is the W3C trace context of the enqueue ("" when none). The
	// handler's context already carries it, so spans the handler starts join the
	// producer's trace.
	Traceparent string
	// WorkflowID and Step name the workflow step the job runs ("" for a plain
	// task); Client.GetWorkflow(ctx, WorkflowID) shows the results of the steps it
	// depends on.
	WorkflowID, Step string

	result json.RawMessage
	// report sends a heartbeat carrying progress; nil for a Job no worker runs.
	report func(ctx context.Context, progress json.RawMessage) error
}

// Decode unmarshals the payload into v. A payload that does not fit v never will,
// so the error is marked Permanent: returned from the handler, the task is
// dead-lettered rather than retried.
func (j *Job) Decode(v any) error {
	if err := json.Unmarshal(j.Payload, v); err != nil {
		return Permanent(fmt.Errorf("decode payload of task %s: %w", j.ID, err))
	}
	return nil
}

// SetResult records v, encoded as JSON, as the task's result when the handler
// returns nil. A json.RawMessage is stored as it is.
func (j *Job) SetResult(v any) error {
	if raw, ok := v.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return fmt.Errorf("set result of task %s: not valid JSON", j.ID)
		}
		j.result = raw
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("set result of task %s: %w", j.ID, err)
	}
	j.result = b
	return nil
}

// Result is the result SetResult recorded (nil when none): what an ack of the
// task carries.
func (j *Job) Result() json.RawMessage { return j.result }

// Progress reports v, encoded as JSON (a json.RawMessage as it is; nil clears it),
// as the attempt's progress at once: a heartbeat that also extends the lease. The
// task shows it (GET, the dashboard) until the next report, and after the attempt
// ends, until the next attempt starts. It must encode to at most 4 KiB. The
// worker's periodic heartbeats go on as before and leave it in place. It returns
// ErrLeaseLost when the lease is no longer held (the handler's context then ends
// too), and ErrInvalidRequest when the server refuses v.
func (j *Job) Progress(ctx context.Context, v any) error {
	if j.report == nil {
		return fmt.Errorf("progress of task %s: the job does not come from a running Worker", j.ID)
	}
	var raw json.RawMessage
	switch p := v.(type) {
	case nil:
		raw = json.RawMessage("null")
	case json.RawMessage:
		if !json.Valid(p) {
			return fmt.Errorf("progress of task %s: not valid JSON", j.ID)
		}
		raw = p
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("progress of task %s: %w", j.ID, err)
		}
		raw = b
	}
	if err := j.report(ctx, raw); err != nil {
		return fmt.Errorf("progress of task %s: %w", j.ID, err)
	}
	return nil
}

// panicError is a recovered handler panic.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", e.value, e.stack) }
