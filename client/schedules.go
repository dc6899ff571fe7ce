package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Schedule fires one task into Queue per tick of Cron in Timezone (GET /schedules/:name).
type Schedule struct {
	Name           string          `json:"name"`
	Queue          string          `json:"queue"`
	Cron           string          `json:"cron"`
	Timezone       string          `json:"timezone"`
	Payload        json.RawMessage `json:"payload"`
	Priority       int             `json:"priority"`
	MaxRetries     *int            `json:"max_retries"` // nil: the queue's default
	TimeoutSeconds *int            `json:"timeout_seconds"`
	Paused         bool            `json:"paused"`
	// NextRunAt is the next tick; nil while paused or when the expression fires no more.
	NextRunAt  *time.Time `json:"next_run_at"`
	LastRunAt  *time.Time `json:"last_run_at"`
	LastTaskID *string    `json:"last_task_id"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// ScheduleSettings are the fields CreateSchedule and UpdateSchedule may give. Nil
// pointers and zero Nullables are left out of the request: on create they take the
// server's defaults (timezone UTC, priority 5, the queue's max_retries, no timeout,
// not paused), on update they stay as they are. Queue, Cron and Payload are required
// on create.
type ScheduleSettings struct {
	Queue *string
	// Cron: five fields (minute hour day-of-month month day-of-week), six with a
	// leading seconds field, @yearly, @monthly, @weekly, @daily, @hourly, or
	// "@every <duration>" (whole seconds, at least 1s).
	Cron     *string
	Timezone *string // an IANA zone name such as "Europe/Berlin"
	// Payload is marshalled to JSON; a json.RawMessage is sent as it is.
	Payload        any
	Priority       *int
	MaxRetries     Nullable[int] // Null: the queue's default
	TimeoutSeconds Nullable[int] // Null: no timeout
	Paused         *bool
}

func (s ScheduleSettings) body() map[string]any {
	m := map[string]any{}
	if s.Queue != nil {
		m["queue"] = *s.Queue
	}
	if s.Cron != nil {
		m["cron"] = *s.Cron
	}
	if s.Timezone != nil {
		m["timezone"] = *s.Timezone
	}
	if s.Payload != nil {
		m["payload"] = s.Payload
	}
	if s.Priority != nil {
		m["priority"] = *s.Priority
	}
	s.MaxRetries.put(m, "max_retries")
	s.TimeoutSeconds.put(m, "timeout_seconds")
	if s.Paused != nil {
		m["paused"] = *s.Paused
	}
	return m
}

// CreateSchedule creates the schedule name. It fails with ErrScheduleExists when the
// name is taken, ErrQueueNotFound when the queue does not exist, and
// ErrInvalidRequest for a bad cron expression, time zone or setting.
func (c *Client) CreateSchedule(ctx context.Context, name string, s ScheduleSettings) (*Schedule, error) {
	body := s.body()
	body["name"] = name
	var out Schedule
	if _, _, err := c.do(ctx, http.MethodPost, "/schedules", nil, body, &out); err != nil {
		return nil, fmt.Errorf("create schedule %q: %w", name, err)
	}
	return &out, nil
}

// ListSchedules returns the schedules by name; those of queue only, when it is not empty.
func (c *Client) ListSchedules(ctx context.Context, queue string) ([]Schedule, error) {
	var q url.Values
	if queue != "" {
		q = url.Values{"queue": {queue}}
	}
	var out struct {
		Schedules []Schedule `json:"schedules"`
	}
	if _, _, err := c.do(ctx, http.MethodGet, "/schedules", q, nil, &out); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return out.Schedules, nil
}

// GetSchedule returns the schedule name, or an error matching ErrScheduleNotFound.
func (c *Client) GetSchedule(ctx context.Context, name string) (*Schedule, error) {
	var out Schedule
	if _, _, err := c.do(ctx, http.MethodGet, "/schedules/"+esc(name), nil, nil, &out); err != nil {
		return nil, fmt.Errorf("get schedule %q: %w", name, err)
	}
	return &out, nil
}

// UpdateSchedule changes the fields given in s and returns the schedule as it is now,
// its next tick recomputed from now. Pausing fires nothing until resumed; resuming
// fires from the next tick on.
func (c *Client) UpdateSchedule(ctx context.Context, name string, s ScheduleSettings) (*Schedule, error) {
	var out Schedule
	if _, _, err := c.do(ctx, http.MethodPatch, "/schedules/"+esc(name), nil, s.body(), &out); err != nil {
		return nil, fmt.Errorf("update schedule %q: %w", name, err)
	}
	return &out, nil
}

// DeleteSchedule deletes the schedule; the tasks it created stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	if _, _, err := c.do(ctx, http.MethodDelete, "/schedules/"+esc(name), nil, nil, nil); err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, err)
	}
	return nil
}

// TriggerSchedule enqueues the schedule's task now and returns it; the schedule's
// next tick is unchanged.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (*Task, error) {
	var t Task
	if _, _, err := c.do(ctx, http.MethodPost, "/schedules/"+esc(name)+"/trigger", nil, nil, &t); err != nil {
		return nil, fmt.Errorf("trigger schedule %q: %w", name, err)
	}
	return &t, nil
}
