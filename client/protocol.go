package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/taskforge/taskforge/client/wire"
)

// PolledTask is a task a poll handed to a worker, under a lease. Attempt is the
// 1-based attempt number: a monotonic fencing token for the worker's own side
// effects. LeaseToken identifies this claim; heartbeats, acks and nacks must
// carry it.
type PolledTask = wire.PolledTask

// PollRequest asks for tasks (POST /workers/poll).
type PollRequest struct {
	WorkerID string   // required, 1..200 characters
	Queues   []string // tried in the order given
	MaxTasks int      // 1..100; 0 means 1
	// Wait is how long the server may hold the request open for the first task
	// (rounded down to milliseconds, at most 30s); zero returns at once.
	Wait time.Duration
	// Prefetch asks only for tasks of queues without a concurrency cap: the poll is
	// for tasks the worker will hold until a slot frees, and a task waiting at the
	// worker would take one of a cap's slots without running. It is PrefetchTasks
	// = MaxTasks, as servers before PrefetchTasks understand it.
	Prefetch bool
	// PrefetchTasks (0..MaxTasks) is how many of the MaxTasks tasks the worker will
	// hold until a slot frees: the first MaxTasks-PrefetchTasks tasks of the answer
	// fill free slots and may come from any queue, the rest come only from queues
	// without a concurrency cap (no max_concurrency, no group cap). Zero is not
	// sent; a server older than the field refuses a poll with it (ErrInvalidRequest).
	PrefetchTasks int
	// Acks (up to 100) are committed before the poll claims anything, saving a
	// request per task. A poll carrying acks does not wait for work: it answers
	// as soon as they are committed, with whatever tasks were ready.
	Acks []AckItem
}

// PollResult is the answer to a poll.
type PollResult struct {
	Tasks []PolledTask
	// RetryAfter, when positive on an empty answer, is when a rate-limited queue
	// that holds waiting work will next have a token.
	RetryAfter time.Duration
	// Acks are the outcomes of the request's Acks, in order.
	Acks []AckResult
}

// Poll claims up to MaxTasks tasks, waiting up to Wait for the first to arrive.
// No tasks means nothing arrived in time.
func (c *Client) Poll(ctx context.Context, r PollRequest) (*PollResult, error) {
	res, _, err := c.poll(ctx, r)
	return res, err
}

// poll is Poll that also returns the server's Date header (zero when absent).
func (c *Client) poll(ctx context.Context, r PollRequest) (*PollResult, time.Time, error) {
	body := wire.PollRequest{WorkerID: r.WorkerID, Queues: r.Queues, MaxTasks: Ptr(max(r.MaxTasks, 1)),
		WaitMs: Ptr(int(r.Wait.Milliseconds())), Prefetch: r.Prefetch, Acks: r.Acks}
	if r.PrefetchTasks > 0 {
		body.PrefetchTasks = Ptr(r.PrefetchTasks)
	}
	var out wire.PollResponse
	date, status, err := c.do(ctx, http.MethodPost, "/workers/poll", nil, body, &out)
	if err != nil {
		return nil, date, fmt.Errorf("poll %v: %w", r.Queues, err)
	}
	res := &PollResult{Tasks: out.Tasks, RetryAfter: time.Duration(out.RetryAfterMs) * time.Millisecond}
	if len(r.Acks) > 0 {
		if res.Acks, err = ackResults(r.Acks, out.Acks, status); err != nil {
			return nil, date, fmt.Errorf("poll %v: %w", r.Queues, err)
		}
	}
	return res, date, nil
}

// LeaseState is a lease after a heartbeat.
type LeaseState struct {
	ExpiresAt       time.Time `json:"lease_expires_at"` // zero for a worker-only heartbeat
	CancelRequested bool      `json:"cancel_requested"` // the task was cancelled: stop and nack
}

// Heartbeat extends the lease on a task (POST /workers/heartbeat). With an empty
// taskID it only records workerID as alive. It fails with ErrLeaseLost when the
// lease is no longer held.
func (c *Client) Heartbeat(ctx context.Context, workerID, taskID, leaseToken string) (*LeaseState, error) {
	l, _, err := c.heartbeat(ctx, workerID, taskID, leaseToken)
	return l, err
}

// ReportProgress heartbeats the lease on a task, as Heartbeat does, and stores
// progress (a JSON value of at most 4 KiB, as sent) as the attempt's progress,
// shown on the task until the next report or the next attempt. A nil progress, or
// JSON null, clears it. It fails with ErrLeaseLost when the lease is no longer
// held, and with ErrInvalidRequest when progress is too large or not JSON.
func (c *Client) ReportProgress(ctx context.Context, workerID, taskID, leaseToken string, progress json.RawMessage) (*LeaseState, error) {
	if progress == nil {
		progress = json.RawMessage("null")
	}
	l, _, err := c.heartbeatWith(ctx, workerID, taskID, leaseToken, progress)
	return l, err
}

func (c *Client) heartbeat(ctx context.Context, workerID, taskID, leaseToken string) (*LeaseState, time.Time, error) {
	return c.heartbeatWith(ctx, workerID, taskID, leaseToken, nil)
}

// heartbeatWith is a heartbeat that carries progress unless it is nil.
func (c *Client) heartbeatWith(ctx context.Context, workerID, taskID, leaseToken string, progress json.RawMessage) (*LeaseState, time.Time, error) {
	body := wire.HeartbeatRequest{LeaseRequest: wire.LeaseRequest{WorkerID: workerID}, Progress: progress}
	if taskID != "" {
		body.TaskID, body.LeaseToken = taskID, leaseToken
	}
	var out wire.HeartbeatResponse
	date, _, err := c.do(ctx, http.MethodPost, "/workers/heartbeat", nil, body, &out)
	if err != nil {
		return nil, date, fmt.Errorf("heartbeat task %s: %w", taskID, err)
	}
	l := &LeaseState{CancelRequested: out.CancelRequested}
	if out.LeaseExpiresAt != nil {
		l.ExpiresAt = *out.LeaseExpiresAt
	}
	return l, date, nil
}

// LeaseRef names one lease to heartbeat: a task and the token of its claim.
type LeaseRef = wire.LeaseRef

// LeaseResult is one lease of a batch heartbeat: the extended lease, or Err
// (ErrLeaseLost) when it is no longer held.
type LeaseResult struct {
	TaskID string
	Lease  LeaseState
	Err    error
}

// HeartbeatBatch extends every lease in refs in one request and one commit
// (POST /workers/heartbeat/batch, at most 1,000). Each lease is extended or
// refused on its own; the results follow refs' order. The returned error means
// none was extended.
func (c *Client) HeartbeatBatch(ctx context.Context, workerID string, refs []LeaseRef) ([]LeaseResult, error) {
	res, _, err := c.heartbeatBatch(ctx, workerID, refs)
	return res, err
}

func (c *Client) heartbeatBatch(ctx context.Context, workerID string, refs []LeaseRef) ([]LeaseResult, time.Time, error) {
	var out wire.HeartbeatBatchResponse
	date, status, err := c.do(ctx, http.MethodPost, "/workers/heartbeat/batch", nil,
		wire.HeartbeatBatchRequest{WorkerID: workerID, Leases: refs}, &out)
	if err != nil {
		return nil, date, fmt.Errorf("heartbeat %d tasks: %w", len(refs), err)
	}
	if len(out.Leases) != len(refs) {
		return nil, date, fmt.Errorf("heartbeat %d tasks: server answered %d leases (status %d)", len(refs), len(out.Leases), status)
	}
	results := make([]LeaseResult, len(refs))
	for i, l := range out.Leases {
		if l.TaskID != refs[i].TaskID {
			return nil, date, fmt.Errorf("heartbeat %d tasks: server answered out of order: %s for %s", len(refs), l.TaskID, refs[i].TaskID)
		}
		results[i] = LeaseResult{TaskID: l.TaskID}
		if l.LeaseExpiresAt != nil {
			results[i].Lease.ExpiresAt = *l.LeaseExpiresAt
		}
		if l.CancelRequested != nil {
			results[i].Lease.CancelRequested = *l.CancelRequested
		}
		if l.Error != nil {
			results[i].Err = fmt.Errorf("heartbeat task %s: %w", l.TaskID, &APIError{Status: http.StatusConflict, Code: l.Error.Code, Message: l.Error.Message})
		}
	}
	return results, date, nil
}

// Ack records that the attempt succeeded, with an optional JSON result, and returns
// the task (done). It fails with ErrLeaseLost when the lease is no longer held.
func (c *Client) Ack(ctx context.Context, workerID, taskID, leaseToken string, result json.RawMessage) (*Task, error) {
	body := wire.AckRequest{LeaseRequest: wire.LeaseRequest{WorkerID: workerID, TaskID: taskID, LeaseToken: leaseToken}, Result: result}
	var out Task
	if _, _, err := c.do(ctx, http.MethodPost, "/workers/ack", nil, body, &out); err != nil {
		return nil, fmt.Errorf("ack task %s: %w", taskID, err)
	}
	return &out, nil
}

// AckItem is one ack of a batch: TaskID, LeaseToken and an optional Result.
type AckItem = wire.AckItem

// AckResult is the outcome of one ack of a batch: Task when it was acked, Err
// (matching ErrLeaseLost) when it was refused.
type AckResult struct {
	TaskID string
	Task   *Task
	Err    error
}

// AckBatch acks up to 100 tasks of one worker in one request (POST
// /workers/ack/batch), committed together on the server. Items succeed or fail on
// their own; the error is for the request as a whole (nothing was acked).
func (c *Client) AckBatch(ctx context.Context, workerID string, items []AckItem) ([]AckResult, error) {
	return c.ackBatch(ctx, workerID, items, nil)
}

// AckBatchMinimal is AckBatch for a worker that does not need the done tasks back:
// each result's Task is nil, and the server encodes none ("Prefer: return=minimal").
func (c *Client) AckBatchMinimal(ctx context.Context, workerID string, items []AckItem) ([]AckResult, error) {
	return c.ackBatch(ctx, workerID, items, preferMinimal)
}

func (c *Client) ackBatch(ctx context.Context, workerID string, items []AckItem, header http.Header) ([]AckResult, error) {
	var out wire.AckBatchResponse
	_, status, err := c.doWith(ctx, http.MethodPost, "/workers/ack/batch", nil, header, wire.AckBatchRequest{WorkerID: workerID, Acks: items}, &out)
	if err != nil {
		return nil, fmt.Errorf("ack %d tasks: %w", len(items), err)
	}
	results, err := ackResults(items, out.Results, status)
	if err != nil {
		return nil, fmt.Errorf("ack %d tasks: %w", len(items), err)
	}
	return results, nil
}

// ackResults turns the server's answer to items into AckResults, in order.
func ackResults(items []AckItem, got []wire.AckResult, status int) ([]AckResult, error) {
	if len(got) != len(items) {
		return nil, fmt.Errorf("server answered %d ack results for %d acks (status %d)", len(got), len(items), status)
	}
	results := make([]AckResult, len(items))
	for i, r := range got {
		if r.TaskID != items[i].TaskID {
			return nil, fmt.Errorf("server answered ack results out of order: %s for %s", r.TaskID, items[i].TaskID)
		}
		results[i] = AckResult{TaskID: r.TaskID, Task: r.Task}
		if r.Error != nil {
			results[i].Err = fmt.Errorf("ack task %s: %w", r.TaskID, &APIError{Status: http.StatusConflict, Code: r.Error.Code, Message: r.Error.Message})
		}
	}
	return results, nil
}

// NackRequest reports a failed attempt (POST /workers/nack).
type NackRequest struct {
	WorkerID   string
	TaskID     string
	LeaseToken string
	Error      string // recorded on the attempt and as the task's last_error
	// Permanent sends retryable=false: the task goes to the dead-letter queue.
	Permanent bool
	// RetryAfter, when not nil, replaces the queue's backoff for the next attempt.
	RetryAfter *time.Duration
}

// Nack records that the attempt failed and returns the task: retry (with its next
// ScheduledAt), dead, or cancelled when a cancel was requested. It fails with
// ErrLeaseLost when the lease is no longer held.
func (c *Client) Nack(ctx context.Context, r NackRequest) (*Task, error) {
	body := wire.NackRequest{LeaseRequest: wire.LeaseRequest{WorkerID: r.WorkerID, TaskID: r.TaskID, LeaseToken: r.LeaseToken},
		Error: r.Error, Retryable: Ptr(!r.Permanent)}
	if r.RetryAfter != nil {
		body.RetryAfterMs = Ptr(max(r.RetryAfter.Milliseconds(), 0))
	}
	var out Task
	if _, _, err := c.do(ctx, http.MethodPost, "/workers/nack", nil, body, &out); err != nil {
		return nil, fmt.Errorf("nack task %s: %w", r.TaskID, err)
	}
	return &out, nil
}

// ReleaseRequest hands back a task the worker will not finish (POST /workers/release).
type ReleaseRequest struct {
	WorkerID   string
	TaskID     string
	LeaseToken string
	Reason     string // recorded on the attempt and as the task's last_error
	// Delay, when positive, snoozes the task: it is due again Delay from now
	// (rounded down to milliseconds, at most MaxSnooze) rather than in its old place.
	Delay time.Duration
}

// Release ends the attempt as released and returns the task: pending again, in its
// old place in line or after r.Delay, with its retry budget untouched (or cancelled
// when a cancel was requested). A Worker calls it for the tasks it cannot finish when it stops.
// It fails with ErrLeaseLost when the lease is no longer held, and with
// ErrNotFound from a server older than the release endpoint.
func (c *Client) Release(ctx context.Context, r ReleaseRequest) (*Task, error) {
	body := wire.ReleaseRequest{LeaseRequest: wire.LeaseRequest{WorkerID: r.WorkerID, TaskID: r.TaskID, LeaseToken: r.LeaseToken},
		Reason: r.Reason}
	if r.Delay > 0 {
		body.DelayMs = Ptr(r.Delay.Milliseconds())
	}
	var out Task
	if _, _, err := c.do(ctx, http.MethodPost, "/workers/release", nil, body, &out); err != nil {
		return nil, fmt.Errorf("release task %s: %w", r.TaskID, err)
	}
	return &out, nil
}

// ListWorkers returns every worker the server has seen; Stale marks those silent
// for over three heartbeat intervals.
func (c *Client) ListWorkers(ctx context.Context) ([]WorkerInfo, error) {
	var out struct {
		Workers []WorkerInfo `json:"workers"`
	}
	if _, _, err := c.do(ctx, http.MethodGet, "/workers", nil, nil, &out); err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out.Workers, nil
}
