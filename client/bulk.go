package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// MaxTaskWait is the longest one GetTaskWait may wait on the server.
const MaxTaskWait = 30 * time.Second

// StatusBlocked is the status of a workflow task waiting on its parents; bulk cancel
// accepts it (it matches no task on servers without workflows).
const StatusBlocked = "blocked"

// waitMargin is the least left of a context's deadline so that the server's answer
// at the end of its wait arrives before the context ends; WaitTask leaves half of
// what remains when that is more, so a short deadline on a slow server still gets
// an answer, and the rounds near a far deadline halve.
const waitMargin = 100 * time.Millisecond

// Terminal reports whether status is one a task never leaves: done, dead or cancelled.
func Terminal(status string) bool {
	return status == StatusDone || status == StatusDead || status == StatusCancelled
}

// GetTaskWait returns the task once it is terminal (done, dead or cancelled), or as
// it is when wait (at most MaxTaskWait) ends, whichever comes first.
func (c *Client) GetTaskWait(ctx context.Context, queue, id string, wait time.Duration) (*Task, error) {
	if wait < 0 || wait > MaxTaskWait {
		return nil, fmt.Errorf("wait for task %s: wait %s is not within 0..%s", id, wait, MaxTaskWait)
	}
	q := url.Values{"wait_ms": {strconv.FormatInt(wait.Milliseconds(), 10)}}
	var out Task
	if _, _, err := c.do(ctx, http.MethodGet, "/queues/"+esc(queue)+"/tasks/"+esc(id), q, nil, &out); err != nil {
		return nil, fmt.Errorf("wait for task %s in %q: %w", id, queue, err)
	}
	if out.AttemptHistory == nil {
		out.AttemptHistory = []Attempt{}
	}
	return &out, nil
}

// WaitTask waits until the task is terminal and returns it, asking the server in
// rounds of at most MaxTaskWait. When ctx ends first it returns the task as last
// read (nil if never) with ctx's error; any other error ends the wait too.
func (c *Client) WaitTask(ctx context.Context, queue, id string) (*Task, error) {
	var last *Task
	for {
		wait := MaxTaskWait
		if deadline, ok := ctx.Deadline(); ok {
			left := time.Until(deadline)
			wait = max(0, min(wait, left-max(waitMargin, left/2)))
		}
		t, err := c.GetTaskWait(ctx, queue, id, wait)
		if err != nil {
			return last, err
		}
		last = t
		if Terminal(t.Status) {
			return t, nil
		}
		if wait == 0 { // too close to the deadline for another round
			<-ctx.Done()
		}
		if ctx.Err() != nil {
			return last, fmt.Errorf("wait for task %s in %q: %w", id, queue, context.Cause(ctx))
		}
	}
}

// BulkCancel is what a bulk cancel did.
type BulkCancel struct {
	// Cancelled counts the tasks that ended cancelled.
	Cancelled int `json:"cancelled"`
	// CancelRequested counts executing tasks, named by id, now flagged: each stops
	// at its worker's next heartbeat.
	CancelRequested int `json:"cancel_requested"`
}

// CancelTasks cancels up to MaxBatch tasks of queue by id, as CancelTask does each.
// Finished tasks and ids of no task of queue are skipped.
func (c *Client) CancelTasks(ctx context.Context, queue string, ids []string) (BulkCancel, error) {
	body := struct {
		IDs []string `json:"ids"`
	}{ids}
	return c.bulkCancel(ctx, queue, body, fmt.Sprintf("%d tasks", len(ids)))
}

// CancelByStatus cancels every task of queue with status StatusPending (buffered
// ones included), StatusRetry or StatusBlocked. The server works in batches; the
// call returns when all are done, which for millions of tasks takes minutes, so give
// ctx room.
func (c *Client) CancelByStatus(ctx context.Context, queue, status string) (BulkCancel, error) {
	body := struct {
		Status string `json:"status"`
	}{status}
	return c.bulkCancel(ctx, queue, body, status+" tasks")
}

func (c *Client) bulkCancel(ctx context.Context, queue string, body any, what string) (BulkCancel, error) {
	var out BulkCancel
	if _, _, err := c.do(ctx, http.MethodPost, "/queues/"+esc(queue)+"/tasks/cancel", nil, body, &out); err != nil {
		return BulkCancel{}, fmt.Errorf("cancel %s of %q: %w", what, queue, err)
	}
	return out, nil
}

// DiscardDeadTasks deletes up to MaxBatch dead tasks of queue and their attempts,
// and returns how many it deleted; ids that are not dead tasks of queue are skipped.
func (c *Client) DiscardDeadTasks(ctx context.Context, queue string, ids []string) (int, error) {
	body := struct {
		IDs []string `json:"ids"`
	}{ids}
	return c.discard(ctx, queue, body, fmt.Sprintf("%d dead tasks", len(ids)))
}

// DiscardAllDead deletes every dead task of queue and their attempts, and returns
// how many it deleted.
func (c *Client) DiscardAllDead(ctx context.Context, queue string) (int, error) {
	body := struct {
		All bool `json:"all"`
	}{true}
	return c.discard(ctx, queue, body, "all dead tasks")
}

func (c *Client) discard(ctx context.Context, queue string, body any, what string) (int, error) {
	var out struct {
		Discarded int `json:"discarded"`
	}
	if _, _, err := c.do(ctx, http.MethodDelete, "/queues/"+esc(queue)+"/dlq", nil, body, &out); err != nil {
		return 0, fmt.Errorf("discard %s of %q: %w", what, queue, err)
	}
	return out.Discarded, nil
}
