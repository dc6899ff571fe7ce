package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/taskforge/taskforge/client/wire"
)

// Workflow statuses.
const (
	WorkflowRunning   = "running"
	WorkflowSucceeded = "succeeded"
	WorkflowFailed    = "failed"
	WorkflowCancelled = "cancelled"
)

// MaxWorkflowSteps is the most steps one workflow may have.
const MaxWorkflowSteps = 1000

// Workflow is the API's workflow object (GET /workflows/:id): a DAG of steps, each
// a task, with its state. It is the wire package's, shared with the server.
type Workflow = wire.Workflow

// WorkflowStep is one step of a Workflow with the state of its current task (a
// resumed step has a new task). The task fields are nil when the task no longer
// exists (a discarded dead step).
type WorkflowStep = wire.WorkflowStep

// NewWorkflow is a workflow to submit.
type NewWorkflow struct {
	Name string `json:"name,omitempty"`
	// IdempotencyKey makes a repeated submission return the stored workflow; the
	// same key with a different request fails with ErrIdempotencyConflict.
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Steps          []NewStep `json:"steps"`
}

// NewStep is one step of a NewWorkflow: a task of Queue that runs once every step
// named in DependsOn is done. Step names match the queue-name pattern.
type NewStep struct {
	Step      string   `json:"step"`
	Queue     string   `json:"queue"`
	DependsOn []string `json:"depends_on,omitempty"`
	// Payload is marshalled to JSON; a json.RawMessage is sent as it is. Required.
	Payload        any        `json:"payload"`
	Priority       *int       `json:"priority,omitempty"`
	ScheduledAt    *time.Time `json:"scheduled_at,omitempty"`
	MaxRetries     *int       `json:"max_retries,omitempty"`
	TimeoutSeconds *int       `json:"timeout_seconds,omitempty"`
}

// WorkflowPage is one page of ListWorkflows.
type WorkflowPage struct {
	Workflows  []Workflow `json:"workflows"`
	NextCursor string     `json:"next_cursor"`
}

// WorkflowFilter selects workflows for ListWorkflows. Zero fields match all.
type WorkflowFilter struct {
	Status string // running, succeeded, failed or cancelled
	Limit  int    // 1..500; 0 = the server's default (100)
	Cursor string // NextCursor of the previous page
}

// SubmitWorkflow inserts every step's task in one transaction: steps without
// dependencies are pending, the others blocked until their dependencies are done.
// created is false when the idempotency key returned an earlier, identical
// workflow. It fails with ErrInvalidRequest (duplicate or invalid step names, an
// unknown dependency, a cycle, an invalid task field), ErrQueueNotFound or
// ErrIdempotencyConflict; nothing is created then.
func (c *Client) SubmitWorkflow(ctx context.Context, w NewWorkflow) (wf *Workflow, created bool, err error) {
	var out Workflow
	_, status, err := c.do(ctx, http.MethodPost, "/workflows", nil, w, &out)
	if err != nil {
		return nil, false, fmt.Errorf("submit workflow: %w", err)
	}
	return &out, status == http.StatusCreated, nil
}

// GetWorkflow returns a workflow with its steps, or an error matching
// ErrWorkflowNotFound. A step's handler reads its dependencies' results here.
func (c *Client) GetWorkflow(ctx context.Context, id string) (*Workflow, error) {
	var out Workflow
	if _, _, err := c.do(ctx, http.MethodGet, "/workflows/"+esc(id), nil, nil, &out); err != nil {
		return nil, fmt.Errorf("get workflow %s: %w", id, err)
	}
	return &out, nil
}

// ListWorkflows returns one page of workflows, newest first.
func (c *Client) ListWorkflows(ctx context.Context, f WorkflowFilter) (*WorkflowPage, error) {
	q := url.Values{}
	if f.Status != "" {
		q.Set("status", f.Status)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Cursor != "" {
		q.Set("cursor", f.Cursor)
	}
	var out WorkflowPage
	if _, _, err := c.do(ctx, http.MethodGet, "/workflows", q, nil, &out); err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	return &out, nil
}

// CancelWorkflow cancels a running workflow: every unfinished step is cancelled
// (executing ones are asked to stop) and the workflow ends cancelled. It fails
// with ErrWorkflowNotFound, or ErrWorkflowNotCancellable when it already finished.
func (c *Client) CancelWorkflow(ctx context.Context, id string) (*Workflow, error) {
	var out Workflow
	if _, _, err := c.do(ctx, http.MethodDelete, "/workflows/"+esc(id), nil, nil, &out); err != nil {
		return nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	return &out, nil
}
