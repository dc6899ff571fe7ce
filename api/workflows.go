package api

import (
	"github.com/taskforge/taskforge/internal/view"

	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Workflows: POST /workflows, GET /workflows/:id, GET /workflows and
// DELETE /workflows/:id (docs/workflows.md).

// maxWorkflowNameLen bounds a workflow's name.
const maxWorkflowNameLen = 200

// workflowRequest is the body of POST /workflows.
type workflowRequest struct {
	Name           *string       `json:"name"`
	IdempotencyKey *string       `json:"idempotency_key"`
	Steps          []stepRequest `json:"steps"`
}

// stepRequest is one step: a task of queue, run once every step of depends_on is done.
type stepRequest struct {
	Step           string          `json:"step"`
	Queue          string          `json:"queue"`
	DependsOn      []string        `json:"depends_on"`
	Payload        json.RawMessage `json:"payload"`
	Priority       *int            `json:"priority"`
	ScheduledAt    *time.Time      `json:"scheduled_at"`
	MaxRetries     *int            `json:"max_retries"`
	TimeoutSeconds *int            `json:"timeout_seconds"`
	Group          *string         `json:"group"`
}

// workflowFingerprint is the SHA-256 of the canonical request: its name and each
// step (name, queue, dependencies, and the task fields as an enqueue's fingerprint
// sees them).
func workflowFingerprint(name *string, steps []storage.NewStep) ([]byte, error) {
	type canonicalStep struct {
		Step      string   `json:"step"`
		DependsOn []string `json:"depends_on"`
		Task      string   `json:"task"` // the enqueue fingerprint of the step's task, hex
	}
	c := struct {
		Name  *string         `json:"name"`
		Steps []canonicalStep `json:"steps"`
	}{Name: name}
	for _, st := range steps {
		fp, err := fingerprint(st.Queue, st.Task)
		if err != nil {
			return nil, err
		}
		deps := st.DependsOn
		if deps == nil {
			deps = []string{}
		}
		c.Steps = append(c.Steps, canonicalStep{Step: st.Step, DependsOn: deps, Task: fmt.Sprintf("%x", fp)})
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("workflow fingerprint: %w", err)
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// toNewWorkflow validates r (every field, then the graph) and returns the workflow to
// insert.
func (s *Server) toNewWorkflow(r workflowRequest) (storage.NewWorkflow, error) {
	var w storage.NewWorkflow
	if r.Name != nil && len(*r.Name) > maxWorkflowNameLen {
		return w, invalid("name must be at most %d characters", maxWorkflowNameLen)
	}
	if r.IdempotencyKey != nil {
		if k := *r.IdempotencyKey; k == "" || len(k) > 255 {
			return w, invalid("idempotency_key must be 1 to 255 characters")
		}
	}
	if len(r.Steps) == 0 || len(r.Steps) > storage.MaxWorkflowSteps {
		return w, invalid("steps must hold 1 to %d steps", storage.MaxWorkflowSteps)
	}
	w.Name, w.IdempotencyKey = r.Name, r.IdempotencyKey
	w.Steps = make([]storage.NewStep, len(r.Steps))
	for i, st := range r.Steps {
		if !queueNamePattern.MatchString(st.Queue) {
			return w, invalid("steps[%d]: queue must match %s", i, queueNamePattern)
		}
		t, err := s.toNewTask(st.Queue, enqueueRequest{Payload: st.Payload, Priority: st.Priority,
			ScheduledAt: st.ScheduledAt, MaxRetries: st.MaxRetries, TimeoutSeconds: st.TimeoutSeconds,
			Group: st.Group})
		if err != nil {
			var apiErr *Error
			if errors.As(err, &apiErr) {
				err = &Error{Status: apiErr.Status, Code: apiErr.Code, Message: fmt.Sprintf("steps[%d]: %s", i, apiErr.Message)}
			}
			return w, err
		}
		w.Steps[i] = storage.NewStep{Step: st.Step, Queue: st.Queue, DependsOn: st.DependsOn, Task: t}
	}
	if err := storage.ValidateSteps(w.Steps); err != nil {
		return w, invalid("%s", err.Error())
	}
	if w.IdempotencyKey != nil {
		fp, err := workflowFingerprint(w.Name, w.Steps)
		if err != nil {
			return w, err
		}
		w.Fingerprint = fp
	}
	id, err := uuid.NewV7()
	if err != nil {
		return w, fmt.Errorf("new workflow id: %w", err)
	}
	w.ID = id
	return w, nil
}

// stepQueues lists the distinct queues of steps, in order of first use.
func stepQueues[T any](steps []T, queue func(T) string) []string {
	var out []string
	for _, st := range steps {
		if q := queue(st); !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}

// forbiddenQueue is the first of queues that the caller's token may not use, or "".
func forbiddenQueue(c *gin.Context, queues []string) string {
	for _, q := range queues {
		if !auth.QueueAllowed(c, q) {
			return q
		}
	}
	return ""
}

func forbidden(queue string) *Error {
	return &Error{Status: http.StatusForbidden, Code: auth.CodeForbidden, Message: "this token may not use queue " + strconv.Quote(queue)}
}

// workflowQueues lists the queues of a stored workflow's steps.
func workflowQueues(w storage.Workflow) []string {
	return stepQueues(w.Steps, func(st storage.WorkflowStep) string {
		if st.Queue == nil {
			return ""
		}
		return *st.Queue
	})
}

func (s *Server) submitWorkflow(c *gin.Context) {
	var req workflowRequest
	if err := decode(c, 32*(s.cfg.MaxPayloadBytes+4<<10), &req); err != nil {
		s.fail(c, err)
		return
	}
	if header := c.GetHeader("Idempotency-Key"); header != "" {
		if req.IdempotencyKey != nil && *req.IdempotencyKey != header {
			s.fail(c, invalid("the Idempotency-Key header and idempotency_key differ"))
			return
		}
		req.IdempotencyKey = &header
	}
	w, err := s.toNewWorkflow(req)
	if err != nil {
		s.fail(c, err)
		return
	}
	// Submitting a workflow enqueues into every queue it names.
	if q := forbiddenQueue(c, stepQueues(w.Steps, func(st storage.NewStep) string { return st.Queue })); q != "" {
		s.fail(c, forbidden(q))
		return
	}
	// The steps' spans join the submission's trace, as an enqueue's tasks do.
	out, err := s.lc.SubmitWorkflow(telemetry.FromHeader(c.Request.Context(), c.GetHeader("traceparent")), w)
	if err != nil {
		s.fail(c, err)
		return
	}
	if !out.Created {
		c.JSON(http.StatusOK, view.Workflow(out.Workflow))
		return
	}
	c.JSON(http.StatusCreated, view.Workflow(out.Workflow))
}

// workflowID parses a workflow id from a path; an id that is not a UUID names no
// workflow.
func workflowID(raw string) (uuid.UUID, error) {
	id, err := uuid.Parse(raw)
	if err != nil {
		return uuid.Nil, &Error{Status: http.StatusNotFound, Code: CodeWorkflowNotFound, Message: "workflow ids are UUIDs; no workflow " + strconv.Quote(raw)}
	}
	return id, nil
}

// visibleWorkflow reads workflow :id, answering 404 itself (also to a token that may
// not use one of its queues: it does not learn the workflow exists).
func (s *Server) visibleWorkflow(c *gin.Context) (storage.Workflow, bool) {
	id, err := workflowID(c.Param("id"))
	if err == nil {
		var w storage.Workflow
		if w, err = s.store.GetWorkflow(c.Request.Context(), id); err == nil {
			if forbiddenQueue(c, workflowQueues(w)) == "" {
				return w, true
			}
			err = storage.ErrWorkflowNotFound
		}
	}
	s.fail(c, err)
	return storage.Workflow{}, false
}

func (s *Server) getWorkflow(c *gin.Context) {
	if w, ok := s.visibleWorkflow(c); ok {
		c.JSON(http.StatusOK, view.Workflow(w))
	}
}

func (s *Server) listWorkflows(c *gin.Context) {
	status := c.Query("status")
	if status != "" && !slices.Contains(storage.WorkflowStatuses, status) {
		s.fail(c, invalid("status must be one of %s", strings.Join(storage.WorkflowStatuses, ", ")))
		return
	}
	limit, after, err := page(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	list, next, err := s.store.ListWorkflows(c.Request.Context(), status, limit, after)
	if err != nil {
		s.fail(c, err)
		return
	}
	// A queue-restricted token sees only the workflows whose every queue it may use.
	visible := list[:0]
	for _, w := range list {
		if forbiddenQueue(c, workflowQueues(w)) == "" {
			visible = append(visible, w)
		}
	}
	c.JSON(http.StatusOK, gin.H{"workflows": view.Workflows(visible), "next_cursor": view.EncodeCursor(next)})
}

func (s *Server) cancelWorkflow(c *gin.Context) {
	w, ok := s.visibleWorkflow(c)
	if !ok {
		return
	}
	w, err := s.lc.CancelWorkflow(c.Request.Context(), w.ID)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, view.Workflow(w))
}
