package client

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/taskforge/taskforge/client/wire"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// NewTask is a task to enqueue. Only Payload is required; zero fields take the
// server's or the queue's defaults.
type NewTask struct {
	// Payload is encoded as JSON; a json.RawMessage is sent as it is. A nil
	// Payload is sent as JSON null.
	Payload any
	// Priority is 1 (highest) to 10 (lowest); 0 means the default, 5.
	Priority int
	// ScheduledAt delays the task until then; zero means now.
	ScheduledAt time.Time
	// MaxRetries overrides the queue's retry budget when not nil.
	MaxRetries *int
	// Timeout bounds one attempt (rounded up to whole seconds); zero means none.
	Timeout time.Duration
	// IdempotencyKey makes the enqueue safe to repeat: the same key with the same
	// request returns the task created first; with a different request it fails
	// with ErrIdempotencyConflict.
	IdempotencyKey string
	// DebounceKey makes the enqueue replace the queue's task waiting with the same
	// key (pending, never attempted, not yet due): the same task takes this
	// payload, priority, budget and timeout, is due Debounce from now (never
	// later than DebounceMax after its first enqueue, when DebounceMax is set),
	// and its Debounced count grows by one. Without such a task, a new one is
	// created, due Debounce from now. Excludes IdempotencyKey and ScheduledAt.
	DebounceKey string
	// Debounce is the quiet period (rounded up to whole milliseconds), required
	// with DebounceKey.
	Debounce time.Duration
	// DebounceMax bounds how long a task waits from its first enqueue (rounded up
	// to whole milliseconds); zero means no bound.
	DebounceMax time.Duration
	// Group names the task's group in a fair queue (a tenant, a customer…: 1..200
	// characters of A-Z a-z 0-9 . _ : @ -); "" = the queue's unnamed group.
	Group string
}

// roundUpMs is d in whole milliseconds, rounded up.
func roundUpMs(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// MarshalJSON encodes t as the API's enqueue body.
func (t NewTask) MarshalJSON() ([]byte, error) {
	payload, ok := t.Payload.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(t.Payload)
		if err != nil {
			return nil, fmt.Errorf("encode payload: %w", err)
		}
		payload = b
	}
	body := struct {
		Payload        json.RawMessage `json:"payload"`
		Priority       int             `json:"priority,omitempty"`
		ScheduledAt    *time.Time      `json:"scheduled_at,omitempty"`
		MaxRetries     *int            `json:"max_retries,omitempty"`
		TimeoutSeconds int64           `json:"timeout_seconds,omitempty"`
		IdempotencyKey string          `json:"idempotency_key,omitempty"`
		DebounceKey    string          `json:"debounce_key,omitempty"`
		DebounceMs     int64           `json:"debounce_ms,omitempty"`
		DebounceMaxMs  int64           `json:"debounce_max_ms,omitempty"`
		Group          string          `json:"group,omitempty"`
	}{Group: t.Group, Payload: payload, Priority: t.Priority, MaxRetries: t.MaxRetries, IdempotencyKey: t.IdempotencyKey,
		DebounceKey: t.DebounceKey, DebounceMs: roundUpMs(t.Debounce), DebounceMaxMs: roundUpMs(t.DebounceMax)}
	if !t.ScheduledAt.IsZero() {
		at := t.ScheduledAt.UTC()
		body.ScheduledAt = &at
	}
	if t.Timeout > 0 {
		body.TimeoutSeconds = int64((t.Timeout + time.Second - 1) / time.Second)
	}
	return json.Marshal(body)
}

// Enqueue adds one task to queue and returns it. With an IdempotencyKey already
// used by the same request it returns the existing task as it is now; with a
// DebounceKey whose task is still waiting, that task as this enqueue replaced it
// (Debounced > 0).
func (c *Client) Enqueue(ctx context.Context, queue string, t NewTask) (*Task, error) {
	var out Task
	if _, _, err := c.do(ctx, http.MethodPost, "/queues/"+esc(queue)+"/tasks", nil, t, &out); err != nil {
		return nil, fmt.Errorf("enqueue to %q: %w", queue, err)
	}
	return &out, nil
}

// EnqueueBatch adds up to MaxBatch tasks to queue, all or none, and returns them in
// the order given.
func (c *Client) EnqueueBatch(ctx context.Context, queue string, tasks []NewTask) ([]Task, error) {
	var out struct {
		Tasks []Task `json:"tasks"`
	}
	body := struct {
		Tasks []NewTask `json:"tasks"`
	}{tasks}
	if _, _, err := c.do(ctx, http.MethodPost, "/queues/"+esc(queue)+"/tasks/batch", nil, body, &out); err != nil {
		return nil, fmt.Errorf("enqueue %d tasks to %q: %w", len(tasks), queue, err)
	}
	return out.Tasks, nil
}

// EnqueueBatchMinimal is EnqueueBatch for bulk loads: it returns only the tasks'
// ids, in the order given, and asks the server for nothing more
// ("Prefer: return=minimal"), so that neither side encodes or decodes a task object
// per task.
func (c *Client) EnqueueBatchMinimal(ctx context.Context, queue string, tasks []NewTask) ([]string, error) {
	var out wire.EnqueueBatchMinimalResponse
	body := struct {
		Tasks []NewTask `json:"tasks"`
	}{tasks}
	if _, _, err := c.doWith(ctx, http.MethodPost, "/queues/"+esc(queue)+"/tasks/batch", nil, preferMinimal, body, &out); err != nil {
		return nil, fmt.Errorf("enqueue %d tasks to %q: %w", len(tasks), queue, err)
	}
	if len(out.Tasks) != len(tasks) {
		return nil, fmt.Errorf("enqueue %d tasks to %q: the server answered %d ids", len(tasks), queue, len(out.Tasks))
	}
	ids := make([]string, len(out.Tasks))
	for i, t := range out.Tasks {
		ids[i] = t.ID
	}
	return ids, nil
}

// GetTask returns a task with its AttemptHistory.
func (c *Client) GetTask(ctx context.Context, queue, id string) (*Task, error) {
	var out Task
	if _, _, err := c.do(ctx, http.MethodGet, "/queues/"+esc(queue)+"/tasks/"+esc(id), nil, nil, &out); err != nil {
		return nil, fmt.Errorf("get task %s in %q: %w", id, queue, err)
	}
	if out.AttemptHistory == nil {
		out.AttemptHistory = []Attempt{}
	}
	return &out, nil
}

// TaskFilter selects tasks of a queue for ListTasks. Zero fields match all.
type TaskFilter struct {
	Status        string    // one of the Status constants
	WorkerID      string    // tasks claimed by this worker
	Group         string    // tasks of this group of a fair queue
	CreatedAfter  time.Time // inclusive lower bound
	CreatedBefore time.Time // upper bound
	Limit         int       // page size, 1..500; 0 means the server's default, 100
	Cursor        string    // NextCursor of the previous page
}

func (f TaskFilter) query() url.Values {
	q := url.Values{}
	if f.Status != "" {
		q.Set("status", f.Status)
	}
	if f.WorkerID != "" {
		q.Set("worker_id", f.WorkerID)
	}
	if f.Group != "" {
		q.Set("group", f.Group)
	}
	if !f.CreatedAfter.IsZero() {
		q.Set("created_after", f.CreatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if !f.CreatedBefore.IsZero() {
		q.Set("created_before", f.CreatedBefore.UTC().Format(time.RFC3339Nano))
	}
	if f.Limit != 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Cursor != "" {
		q.Set("cursor", f.Cursor)
	}
	return q
}

// ListTasks returns one page of a queue's tasks, newest first.
func (c *Client) ListTasks(ctx context.Context, queue string, f TaskFilter) (*TaskPage, error) {
	var out TaskPage
	if _, _, err := c.do(ctx, http.MethodGet, "/queues/"+esc(queue)+"/tasks", f.query(), nil, &out); err != nil {
		return nil, fmt.Errorf("list tasks of %q: %w", queue, err)
	}
	return &out, nil
}

// AllTasks iterates over every task f selects, page by page from f.Cursor on.
// It stops at the first error, which it yields.
func (c *Client) AllTasks(ctx context.Context, queue string, f TaskFilter) iter.Seq2[Task, error] {
	return paginate(f.Cursor, func(cursor string) (*TaskPage, error) {
		f.Cursor = cursor
		return c.ListTasks(ctx, queue, f)
	})
}

func paginate(cursor string, page func(cursor string) (*TaskPage, error)) iter.Seq2[Task, error] {
	return func(yield func(Task, error) bool) {
		for {
			p, err := page(cursor)
			if err != nil {
				yield(Task{}, err)
				return
			}
			for _, t := range p.Tasks {
				if !yield(t, nil) {
					return
				}
			}
			if p.NextCursor == "" {
				return
			}
			cursor = p.NextCursor
		}
	}
}

// CancelTask cancels a task. A task not yet executing ends cancelled at once; an
// executing one comes back with CancelRequested set, and its worker hears of it on
// its next heartbeat. A finished task fails with ErrTaskNotCancellable.
func (c *Client) CancelTask(ctx context.Context, queue, id string) (*Task, error) {
	var out Task
	if _, _, err := c.do(ctx, http.MethodDelete, "/queues/"+esc(queue)+"/tasks/"+esc(id), nil, nil, &out); err != nil {
		return nil, fmt.Errorf("cancel task %s in %q: %w", id, queue, err)
	}
	return &out, nil
}

// ListDead returns one page of the queue's dead-letter queue, most recently died
// first. limit is 1..500 (0: the server's default, 100); cursor is the previous
// page's NextCursor, or empty.
func (c *Client) ListDead(ctx context.Context, queue string, limit int, cursor string) (*TaskPage, error) {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out TaskPage
	if _, _, err := c.do(ctx, http.MethodGet, "/queues/"+esc(queue)+"/dlq", q, nil, &out); err != nil {
		return nil, fmt.Errorf("list dead tasks of %q: %w", queue, err)
	}
	return &out, nil
}

// AllDead iterates over every dead task of the queue, pageSize at a time (0: 100).
func (c *Client) AllDead(ctx context.Context, queue string, pageSize int) iter.Seq2[Task, error] {
	return paginate("", func(cursor string) (*TaskPage, error) {
		return c.ListDead(ctx, queue, pageSize, cursor)
	})
}

// ReplayDead creates a new pending task from the dead task id (its ReplayedFrom is
// id) and returns it. The dead task keeps its history.
func (c *Client) ReplayDead(ctx context.Context, queue, id string) (*Task, error) {
	var out Task
	if _, _, err := c.do(ctx, http.MethodPost, "/queues/"+esc(queue)+"/dlq/"+esc(id)+"/replay", nil, nil, &out); err != nil {
		return nil, fmt.Errorf("replay dead task %s in %q: %w", id, queue, err)
	}
	return &out, nil
}

// ReplayDeadTasks replays up to MaxBatch dead tasks in one transaction: all of them,
// or none (ErrTaskNotFound) when any id is not a dead task of the queue.
func (c *Client) ReplayDeadTasks(ctx context.Context, queue string, ids []string) ([]Task, error) {
	body := struct {
		IDs []string `json:"ids"`
	}{ids}
	return c.replay(ctx, queue, body, fmt.Sprintf("%d dead tasks", len(ids)))
}

// ReplayAllDead replays every dead task of the queue in one request, including
// those replayed before.
func (c *Client) ReplayAllDead(ctx context.Context, queue string) ([]Task, error) {
	body := struct {
		All bool `json:"all"`
	}{true}
	return c.replay(ctx, queue, body, "all dead tasks")
}

func (c *Client) replay(ctx context.Context, queue string, body any, what string) ([]Task, error) {
	var out struct {
		Replayed []Task `json:"replayed"`
	}
	if _, _, err := c.do(ctx, http.MethodPost, "/queues/"+esc(queue)+"/dlq/replay", nil, body, &out); err != nil {
		return nil, fmt.Errorf("replay %s of %q: %w", what, queue, err)
	}
	return out.Replayed, nil
}

// DiscardDead deletes a dead task and its attempts.
func (c *Client) DiscardDead(ctx context.Context, queue, id string) error {
	if _, _, err := c.do(ctx, http.MethodDelete, "/queues/"+esc(queue)+"/dlq/"+esc(id), nil, nil, nil); err != nil {
		return fmt.Errorf("discard dead task %s in %q: %w", id, queue, err)
	}
	return nil
}
