package client

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Nullable is an optional queue limit in QueueSettings. The zero value leaves the
// limit as it is (or at its default, on create); Set(v) sets it; Null() clears it:
// unlimited for RateLimit and MaxConcurrency, the default ceil(rate_limit) for RateBurst.
type Nullable[T any] struct {
	set   bool
	null  bool
	value T
}

// Set returns a Nullable that sets the limit to v.
func Set[T any](v T) Nullable[T] { return Nullable[T]{set: true, value: v} }

// Null returns a Nullable that clears the limit.
func Null[T any]() Nullable[T] { return Nullable[T]{set: true, null: true} }

// IsSet reports whether n changes the limit (to a value or to null).
func (n Nullable[T]) IsSet() bool { return n.set }

func (n Nullable[T]) put(m map[string]any, key string) {
	switch {
	case !n.set:
	case n.null:
		m[key] = nil
	default:
		m[key] = n.value
	}
}

// QueueSettings are the settings CreateQueue and UpdateQueue may give. Nil pointers
// and zero Nullables are left out of the request: on create they take the server's
// defaults (max_retries 3, no rate limit, no concurrency cap, backoff 1s..1h, not
// paused), on update they stay as they are.
type QueueSettings struct {
	MaxRetries     *int              // retries after the first attempt, 0..100
	RateLimit      Nullable[float64] // tasks per second dispatched, > 0
	RateBurst      Nullable[int]     // token bucket size, ≥ 1
	MaxConcurrency Nullable[int]     // executing tasks at once, ≥ 1
	BackoffBase    *time.Duration    // first retry delay (sent in milliseconds)
	BackoffMax     *time.Duration    // cap of the retry delay (sent in milliseconds)
	Paused         *bool             // a paused queue dispatches nothing
	// PriorityAging makes each priority level worth that much waiting time (sent
	// in milliseconds), so old low-priority tasks eventually go first; Null means
	// strict priority.
	PriorityAging Nullable[time.Duration]
	// Push makes the queue a push queue (a new target replaces the old one);
	// Null() makes it a pull queue again. A pointer keeps QueueSettings comparable.
	Push Nullable[*PushConfig]
	// Retention changes the ages it sets and keeps the others (on create they take
	// the server's defaults: --retention for done and cancelled, forever for
	// dead); Null() puts every age back to the server's default.
	Retention Nullable[RetentionSettings]
	// IdempotencyWindow keeps an idempotency key reserved that long after its
	// task's creation, even once the task is deleted (0 to 30 days, sent in
	// milliseconds; on create 24 h).
	IdempotencyWindow *time.Duration
	// Fairness "round_robin" makes the queue's groups take weighted turns; Null()
	// puts them back in one line.
	Fairness Nullable[string]
	// The defaults of every group of the queue (a group's overrides win; see
	// PutGroup): executing tasks at once, tasks per second, bucket size.
	GroupMaxConcurrency Nullable[int]
	GroupRateLimit      Nullable[float64]
	GroupRateBurst      Nullable[int]
}

// RetentionSettings are the retention ages a QueueSettings changes, each at least
// a minute (sent in milliseconds); Null() keeps that status forever, and a zero
// Nullable leaves the age as it is.
type RetentionSettings struct {
	Done, Cancelled, Dead Nullable[time.Duration]
}

func (r RetentionSettings) body() map[string]any {
	m := map[string]any{}
	for _, age := range []struct {
		key string
		d   Nullable[time.Duration]
	}{{"done_ms", r.Done}, {"cancelled_ms", r.Cancelled}, {"dead_ms", r.Dead}} {
		switch {
		case !age.d.set:
		case age.d.null:
			m[age.key] = nil
		default:
			m[age.key] = age.d.value.Milliseconds()
		}
	}
	return m
}

func (s QueueSettings) body() map[string]any {
	m := map[string]any{}
	if s.MaxRetries != nil {
		m["max_retries"] = *s.MaxRetries
	}
	s.RateLimit.put(m, "rate_limit")
	s.RateBurst.put(m, "rate_burst")
	s.MaxConcurrency.put(m, "max_concurrency")
	s.Fairness.put(m, "fairness")
	s.GroupMaxConcurrency.put(m, "group_max_concurrency")
	s.GroupRateLimit.put(m, "group_rate_limit")
	s.GroupRateBurst.put(m, "group_rate_burst")
	if s.BackoffBase != nil {
		m["backoff_base_ms"] = s.BackoffBase.Milliseconds()
	}
	if s.BackoffMax != nil {
		m["backoff_max_ms"] = s.BackoffMax.Milliseconds()
	}
	if s.Paused != nil {
		m["paused"] = *s.Paused
	}
	if s.PriorityAging.set {
		if s.PriorityAging.null {
			m["priority_aging_ms"] = nil
		} else {
			m["priority_aging_ms"] = s.PriorityAging.value.Milliseconds()
		}
	}
	if s.IdempotencyWindow != nil {
		m["idempotency_window_ms"] = s.IdempotencyWindow.Milliseconds()
	}
	if s.Retention.set {
		if s.Retention.null {
			m["retention"] = nil
		} else {
			m["retention"] = s.Retention.value.body()
		}
	}
	if s.Push.set {
		if s.Push.null || s.Push.value == nil {
			m["push"] = nil
		} else {
			m["push"] = s.Push.value.body()
		}
	}
	return m
}

// CreateQueue creates the queue name. It fails with ErrQueueExists when the name is
// taken and ErrInvalidRequest when the name or a setting is out of range.
func (c *Client) CreateQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	body := s.body()
	body["name"] = name
	var q Queue
	if _, _, err := c.do(ctx, http.MethodPost, "/queues", nil, body, &q); err != nil {
		return nil, fmt.Errorf("create queue %q: %w", name, err)
	}
	return &q, nil
}

// ListQueues returns every queue, by name.
func (c *Client) ListQueues(ctx context.Context) ([]Queue, error) {
	var out struct {
		Queues []Queue `json:"queues"`
	}
	if _, _, err := c.do(ctx, http.MethodGet, "/queues", nil, nil, &out); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return out.Queues, nil
}

// GetQueue returns the queue name, or an error matching ErrQueueNotFound.
func (c *Client) GetQueue(ctx context.Context, name string) (*Queue, error) {
	var q Queue
	if _, _, err := c.do(ctx, http.MethodGet, "/queues/"+esc(name), nil, nil, &q); err != nil {
		return nil, fmt.Errorf("get queue %q: %w", name, err)
	}
	return &q, nil
}

// UpdateQueue changes the settings given in s and returns the queue as it is now.
// Changes take effect within a second on every replica.
func (c *Client) UpdateQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	var q Queue
	if _, _, err := c.do(ctx, http.MethodPatch, "/queues/"+esc(name), nil, s.body(), &q); err != nil {
		return nil, fmt.Errorf("update queue %q: %w", name, err)
	}
	return &q, nil
}

// PauseQueue stops the queue from dispatching (POST /queues/:name/pause); tasks
// already executing go on.
func (c *Client) PauseQueue(ctx context.Context, name string) (*Queue, error) {
	var q Queue
	if _, _, err := c.do(ctx, http.MethodPost, "/queues/"+esc(name)+"/pause", nil, nil, &q); err != nil {
		return nil, fmt.Errorf("pause queue %q: %w", name, err)
	}
	return &q, nil
}

// ResumeQueue lets a paused queue dispatch again (POST /queues/:name/resume).
func (c *Client) ResumeQueue(ctx context.Context, name string) (*Queue, error) {
	var q Queue
	if _, _, err := c.do(ctx, http.MethodPost, "/queues/"+esc(name)+"/resume", nil, nil, &q); err != nil {
		return nil, fmt.Errorf("resume queue %q: %w", name, err)
	}
	return &q, nil
}

// DeleteQueue deletes the queue and its finished tasks. It fails with
// ErrQueueNotEmpty while the queue holds unfinished or dead tasks.
func (c *Client) DeleteQueue(ctx context.Context, name string) error {
	if _, _, err := c.do(ctx, http.MethodDelete, "/queues/"+esc(name), nil, nil, nil); err != nil {
		return fmt.Errorf("delete queue %q: %w", name, err)
	}
	return nil
}

// Stats returns the queue's depth by status, throughput, error rate, oldest pending
// age and dead-letter depth.
func (c *Client) Stats(ctx context.Context, queue string) (*Stats, error) {
	var st Stats
	if _, _, err := c.do(ctx, http.MethodGet, "/queues/"+esc(queue)+"/stats", nil, nil, &st); err != nil {
		return nil, fmt.Errorf("stats of queue %q: %w", queue, err)
	}
	return &st, nil
}
