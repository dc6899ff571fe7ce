package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/sealer"
)

// Workflows: DAGs of tasks. A workflow's steps are tasks of any queues, inserted
// together; a step with dependencies waits blocked until the last of them is done.
// The bookkeeping of a running workflow (unblocking, the failure cascade, the end)
// rides inside the statements that end its steps' tasks (see statements.go), so it
// commits with the step's transition or not at all.

// Workflow statuses.
const (
	WorkflowRunning   = "running"
	WorkflowSucceeded = "succeeded"
	WorkflowFailed    = "failed"
	WorkflowCancelled = "cancelled"
)

// WorkflowStatuses lists every workflow status.
var WorkflowStatuses = []string{WorkflowRunning, WorkflowSucceeded, WorkflowFailed, WorkflowCancelled}

// MaxWorkflowSteps is the most steps one workflow may have.
const MaxWorkflowSteps = 1000

// Workflow is a workflow and its steps. Its JSON form is the API's workflow object.
type Workflow struct {
	ID             uuid.UUID      `json:"id" db:"id"`
	Name           *string        `json:"name" db:"name"`
	Status         string         `json:"status" db:"status"`
	IdempotencyKey *string        `json:"idempotency_key" db:"idempotency_key"`
	Fingerprint    []byte         `json:"-" db:"fingerprint"`
	CreatedAt      time.Time      `json:"created_at" db:"created_at"`
	FinishedAt     *time.Time     `json:"finished_at" db:"finished_at"`
	Steps          []WorkflowStep `json:"steps" db:"-"`
}

// WorkflowStep is one step of a workflow with the state of its current task. The
// task fields are null when the task no longer exists (a discarded dead step).
type WorkflowStep struct {
	WorkflowID uuid.UUID       `json:"-" db:"workflow_id"`
	Step       string          `json:"step" db:"step"`
	Queue      *string         `json:"queue" db:"queue"`
	TaskID     uuid.UUID       `json:"task_id" db:"task_id"`
	Status     *string         `json:"status" db:"status"`
	DependsOn  []string        `json:"depends_on" db:"depends_on"`
	Attempts   *int            `json:"attempts" db:"attempts"`
	Result     json.RawMessage `json:"result" db:"result"`
	LastError  *string         `json:"last_error" db:"last_error"`
}

// NewWorkflow is a workflow to submit.
type NewWorkflow struct {
	ID             uuid.UUID
	Name           *string
	IdempotencyKey *string
	Fingerprint    []byte // required when IdempotencyKey is set
	Steps          []NewStep
	// Traceparent is the W3C trace context of the submission, recorded with every
	// step's task (nil: none).
	Traceparent *string
}

// NewStep is one step of a NewWorkflow: a task of Queue (Task.ID set, nil fields
// taking the queue's defaults, no idempotency key) that runs once every step named in
// DependsOn is done.
type NewStep struct {
	Step      string
	Queue     string
	DependsOn []string
	Task      NewTask
}

// InvalidWorkflowError says why a workflow's steps do not form a valid DAG.
type InvalidWorkflowError struct{ Reason string }

func (e *InvalidWorkflowError) Error() string { return e.Reason }

// QueueNotFoundError names the queue a request referred to that does not exist.
type QueueNotFoundError struct{ Queue string }

func (e *QueueNotFoundError) Error() string { return fmt.Sprintf("queue %q not found", e.Queue) }

// Is makes errors.Is(err, ErrQueueNotFound) true.
func (e *QueueNotFoundError) Is(target error) bool { return target == ErrQueueNotFound }

var stepNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidateSteps checks that steps form a DAG: 1 to MaxWorkflowSteps steps, names
// that match the queue-name pattern and are unique, dependencies that name steps of
// the workflow (each once, never the step itself), and no cycle; the error of a
// cycle names its steps in order.
func ValidateSteps(steps []NewStep) error {
	if len(steps) == 0 || len(steps) > MaxWorkflowSteps {
		return &InvalidWorkflowError{fmt.Sprintf("steps must hold 1 to %d steps", MaxWorkflowSteps)}
	}
	index := make(map[string]int, len(steps))
	for i, s := range steps {
		if !stepNamePattern.MatchString(s.Step) {
			return &InvalidWorkflowError{fmt.Sprintf("steps[%d]: step %q must match %s", i, s.Step, stepNamePattern)}
		}
		if _, dup := index[s.Step]; dup {
			return &InvalidWorkflowError{fmt.Sprintf("steps[%d]: duplicate step %q", i, s.Step)}
		}
		index[s.Step] = i
	}
	for i, s := range steps {
		seen := make(map[string]bool, len(s.DependsOn))
		for _, d := range s.DependsOn {
			if _, ok := index[d]; !ok {
				return &InvalidWorkflowError{fmt.Sprintf("steps[%d]: step %q depends on %q, which is no step of this workflow", i, s.Step, d)}
			}
			if d == s.Step {
				return &InvalidWorkflowError{fmt.Sprintf("steps[%d]: step %q depends on itself", i, s.Step)}
			}
			if seen[d] {
				return &InvalidWorkflowError{fmt.Sprintf("steps[%d]: step %q names %q twice in depends_on", i, s.Step, d)}
			}
			seen[d] = true
		}
	}
	if cycle := findCycle(steps, index); cycle != nil {
		return &InvalidWorkflowError{"depends_on forms a cycle: " + strings.Join(cycle, " → ")}
	}
	return nil
}

// findCycle returns the steps of a dependency cycle, the first repeated at the end,
// or nil when there is none. Iterative depth-first search: 1,000 steps in a chain
// must not grow the goroutine stack by recursion.
func findCycle(steps []NewStep, index map[string]int) []string {
	const (
		unseen = iota
		onPath
		finished
	)
	state := make([]int, len(steps))
	type frame struct{ node, next int }
	for start := range steps {
		if state[start] != unseen {
			continue
		}
		path := []frame{{start, 0}}
		state[start] = onPath
		for len(path) > 0 {
			top := &path[len(path)-1]
			deps := steps[top.node].DependsOn
			if top.next == len(deps) {
				state[top.node] = finished
				path = path[:len(path)-1]
				continue
			}
			d := index[deps[top.next]]
			top.next++
			switch state[d] {
			case unseen:
				state[d] = onPath
				path = append(path, frame{d, 0})
			case onPath:
				// The path from d to the top, then d again; reversed so that each
				// step is followed by one it depends on... read as "a needs b".
				var names []string
				for i := len(path) - 1; i >= 0; i-- {
					names = append(names, steps[path[i].node].Step)
					if path[i].node == d {
						break
					}
				}
				slices.Reverse(names)
				return append(names, steps[d].Step)
			}
		}
	}
	return nil
}

// SubmittedWorkflow is the outcome of SubmitWorkflow.
type SubmittedWorkflow struct {
	Workflow Workflow
	Created  bool // false: an identical earlier request with the same idempotency key
}

// SubmitWorkflow validates w (ValidateSteps) and inserts the workflow and all its
// steps' tasks in one transaction: steps without dependencies pending, the others
// blocked. It wakes the dispatchers of the queues that got pending tasks. A repeated
// idempotency key returns the stored workflow (Created false) when the fingerprint
// matches, ErrIdempotencyConflict otherwise. A missing queue fails the whole
// submission with a *QueueNotFoundError.
func (s *Store) SubmitWorkflow(ctx context.Context, w NewWorkflow) (SubmittedWorkflow, error) {
	if err := ValidateSteps(w.Steps); err != nil {
		return SubmittedWorkflow{}, err
	}
	n := len(w.Steps)
	var queues []string
	for _, st := range w.Steps {
		if !slices.Contains(queues, st.Queue) {
			queues = append(queues, st.Queue)
		}
	}
	ids := make([]uuid.UUID, n)
	stepQueues := make([]string, n)
	payloads := make([]string, n)
	priorities := make([]int32, n)
	schedules := make([]*time.Time, n)
	retries := make([]*int32, n)
	timeouts := make([]*int32, n)
	groups := make([]*string, n)
	names := make([]string, n)
	blocked := make([]bool, n)
	ords := make([]int32, n)
	deps := make([]string, n)
	var parents, children []string
	pendingQueues := map[string]bool{}
	for i, st := range w.Steps {
		payload, err := s.seal(st.Queue, sealer.Payload, st.Task.Payload)
		if err != nil {
			return SubmittedWorkflow{}, fmt.Errorf("submit workflow: %w", err)
		}
		ids[i], stepQueues[i], payloads[i] = st.Task.ID, st.Queue, string(payload)
		priorities[i] = int32(st.Task.Priority)
		schedules[i] = st.Task.ScheduledAt
		retries[i] = int32Ptr(st.Task.MaxRetries)
		timeouts[i] = int32Ptr(st.Task.TimeoutSeconds)
		groups[i] = st.Task.Group
		names[i], ords[i] = st.Step, int32(i)
		blocked[i] = len(st.DependsOn) > 0
		deps[i] = strings.Join(st.DependsOn, ",")
		for _, d := range st.DependsOn {
			parents, children = append(parents, d), append(children, st.Step)
		}
		if !blocked[i] {
			pendingQueues[st.Queue] = true
		}
	}

	var out SubmittedWorkflow
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, lockQueuesForWorkflow, queues)
		if err != nil {
			return err
		}
		defaults := map[string]int32{}
		var name string
		var def int32
		_, err = pgx.ForEachRow(rows, []any{&name, &def}, func() error { defaults[name] = def; return nil })
		if err != nil {
			return err
		}
		for _, q := range queues {
			if _, ok := defaults[q]; !ok {
				return &QueueNotFoundError{Queue: q}
			}
		}
		defaultRetries := make([]int32, n)
		for i := range w.Steps {
			defaultRetries[i] = defaults[stepQueues[i]]
		}

		var id uuid.UUID
		var createdAt time.Time
		err = tx.QueryRow(ctx, insertWorkflow, w.ID, w.Name, w.IdempotencyKey, w.Fingerprint, n).Scan(&id, &createdAt)
		if errors.Is(err, pgx.ErrNoRows) && w.IdempotencyKey != nil {
			var prevFP []byte
			if err := tx.QueryRow(ctx, workflowByIdempotencyKey, *w.IdempotencyKey).Scan(&id, &prevFP); err != nil {
				return fmt.Errorf("idempotency key %q: %w", *w.IdempotencyKey, err)
			}
			if !bytes.Equal(prevFP, w.Fingerprint) {
				return ErrIdempotencyConflict
			}
			out.Workflow.ID = id
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, insertWorkflowTasks, w.ID, ids, stepQueues, payloads, priorities,
			schedules, retries, timeouts, names, blocked, defaultRetries, w.Traceparent, groups); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, insertWorkflowSteps, w.ID, names, ords, deps, ids); err != nil {
			return err
		}
		if len(parents) > 0 {
			if _, err := tx.Exec(ctx, insertWorkflowEdges, w.ID, parents, children); err != nil {
				return err
			}
		}
		for _, q := range queues {
			if pendingQueues[q] {
				if _, err := tx.Exec(ctx, notifyDue, DueChannel, q); err != nil {
					return err
				}
			}
		}
		out.Created = true
		out.Workflow = newWorkflowView(w, createdAt, blocked)
		return nil
	})
	if err != nil {
		if isForeignKeyViolation(err) { // a queue was deleted under us
			err = ErrQueueNotFound
		}
		return SubmittedWorkflow{}, fmt.Errorf("submit workflow: %w", err)
	}
	if !out.Created { // the stored workflow, as it is now
		wf, err := s.GetWorkflow(ctx, out.Workflow.ID)
		if err != nil {
			return SubmittedWorkflow{}, err
		}
		out.Workflow = wf
	}
	return out, nil
}

// newWorkflowView is the workflow w as just inserted, without reading it back.
func newWorkflowView(w NewWorkflow, createdAt time.Time, blocked []bool) Workflow {
	out := Workflow{ID: w.ID, Name: w.Name, Status: WorkflowRunning, IdempotencyKey: w.IdempotencyKey,
		Fingerprint: w.Fingerprint, CreatedAt: createdAt, Steps: make([]WorkflowStep, len(w.Steps))}
	for i, st := range w.Steps {
		status, queue, attempts := StatusPending, st.Queue, 0
		if blocked[i] {
			status = StatusBlocked
		}
		deps := st.DependsOn
		if deps == nil {
			deps = []string{}
		}
		out.Steps[i] = WorkflowStep{WorkflowID: w.ID, Step: st.Step, Queue: &queue, TaskID: st.Task.ID,
			Status: &status, DependsOn: deps, Attempts: &attempts}
	}
	return out
}

// GetWorkflow returns a workflow with its steps in the order submitted.
func (s *Store) GetWorkflow(ctx context.Context, id uuid.UUID) (Workflow, error) {
	rows, err := s.pool.Query(ctx, getWorkflow, id)
	w, err := one[Workflow](rows, err, ErrWorkflowNotFound)
	if err != nil {
		return Workflow{}, fmt.Errorf("get workflow %s: %w", id, err)
	}
	list := []Workflow{w}
	if err := s.fillSteps(ctx, list); err != nil {
		return Workflow{}, err
	}
	return list[0], nil
}

// fillSteps reads the steps of the workflows in list.
func (s *Store) fillSteps(ctx context.Context, list []Workflow) error {
	if len(list) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(list))
	at := make(map[uuid.UUID]int, len(list))
	for i, w := range list {
		ids[i], at[w.ID] = w.ID, i
		list[i].Steps = []WorkflowStep{}
	}
	rows, err := s.pool.Query(ctx, workflowSteps, ids)
	if err != nil {
		return fmt.Errorf("workflow steps: %w", err)
	}
	steps, err := pgx.CollectRows(rows, pgx.RowToStructByName[WorkflowStep])
	if err != nil {
		return fmt.Errorf("workflow steps: %w", err)
	}
	for _, st := range steps {
		if s.sealer != nil {
			if st.Result, err = s.sealer.Open(st.TaskID.String(), sealer.Result, st.Result); err != nil {
				return fmt.Errorf("task %s result: %w", st.TaskID, err)
			}
			if err := s.openError(st.TaskID, st.LastError); err != nil {
				return fmt.Errorf("task %s last error: %w", st.TaskID, err)
			}
		}
		i := at[st.WorkflowID]
		list[i].Steps = append(list[i].Steps, st)
	}
	return nil
}

// ListWorkflows returns up to limit workflows newest first, of status when it is not
// empty, with their steps, and the cursor of the next page (nil on the last page).
func (s *Store) ListWorkflows(ctx context.Context, status string, limit int, after *Cursor) ([]Workflow, *Cursor, error) {
	at, atID := cursorArgs(after)
	rows, err := s.pool.Query(ctx, listWorkflows, optional(status), at, atID, limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list workflows: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[Workflow])
	if err != nil {
		return nil, nil, fmt.Errorf("list workflows: %w", err)
	}
	var next *Cursor
	if len(list) > limit {
		list = list[:limit]
		last := list[len(list)-1]
		next = &Cursor{Time: last.CreatedAt, ID: last.ID}
	}
	if err := s.fillSteps(ctx, list); err != nil {
		return nil, nil, err
	}
	return list, next, nil
}

// CancelledStep is a step task that a workflow's cancellation, or the failure cascade
// of one of its steps (StepEffects.Cascaded), changed.
type CancelledStep struct {
	ID         uuid.UUID  `db:"id" json:"id"`
	Queue      string     `db:"queue" json:"queue"`
	Attempts   int        `db:"attempts" json:"attempts"`
	FromStatus string     `db:"from_status" json:"from_status"` // executing: flagged cancel_requested, still running
	WorkflowID *uuid.UUID `db:"workflow_id" json:"workflow_id"`
	Step       *string    `db:"step" json:"step"`
}

// CancelWorkflow cancels a running workflow: every unfinished step's task is
// cancelled (an executing one gets cancel_requested), and the workflow ends
// cancelled, in one transaction. It returns ErrWorkflowNotFound, or
// ErrWorkflowNotCancellable when the workflow already finished.
func (s *Store) CancelWorkflow(ctx context.Context, id uuid.UUID) (Workflow, []CancelledStep, error) {
	var changed []CancelledStep
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var status string
		var generation int
		if err := tx.QueryRow(ctx, lockWorkflow, id).Scan(&status, &generation); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrWorkflowNotFound
			}
			return err
		}
		if status != WorkflowRunning {
			return ErrWorkflowNotCancellable
		}
		rows, err := tx.Query(ctx, cancelWorkflowTasks, id)
		if err != nil {
			return err
		}
		if changed, err = pgx.CollectRows(rows, pgx.RowToStructByName[CancelledStep]); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, endWorkflow, id, WorkflowCancelled)
		return err
	})
	if err != nil {
		return Workflow{}, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	w, err := s.GetWorkflow(ctx, id)
	return w, changed, err
}

// stepState is a step of a workflow being resumed, with its current task.
type stepState struct {
	Step      string    `db:"step"`
	DependsOn []string  `db:"depends_on"`
	TaskID    uuid.UUID `db:"id"`
	Queue     string    `db:"queue"`
	Status    string    `db:"status"`
}

// resumeTx resumes the failed workflow of dead task deadID (locked by the caller)
// if that task is the current task of one of its steps: the dead task's step and
// every other step not done get new tasks (replayed_from = the task they replace;
// blocked while a dependency is not done), and the workflow runs again. It returns
// the new task of the dead task's step, and false when deadID is no current step of
// a failed workflow.
func (s *Store) resumeTx(ctx context.Context, tx pgx.Tx, deadID uuid.UUID) (Task, bool, error) {
	var wfID uuid.UUID
	if err := tx.QueryRow(ctx, workflowOfDead, deadID).Scan(&wfID); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Task{}, false, nil
		}
		return Task{}, false, err
	}
	var status string
	var generation int
	if err := tx.QueryRow(ctx, lockWorkflow, wfID).Scan(&status, &generation); err != nil {
		return Task{}, false, err
	}
	if status != WorkflowFailed {
		return Task{}, false, nil
	}
	rows, err := tx.Query(ctx, lockWorkflowTasks, wfID)
	if err != nil {
		return Task{}, false, err
	}
	steps, err := pgx.CollectRows(rows, pgx.RowToStructByName[stepState])
	if err != nil {
		return Task{}, false, err
	}
	done := map[string]bool{}
	for _, st := range steps {
		if st.Status == StatusDone {
			done[st.Step] = true
		}
	}
	var names []string
	var newIDs []uuid.UUID
	var waiting []int32
	for _, st := range steps {
		if done[st.Step] {
			continue
		}
		id, err := uuid.NewV7()
		if err != nil {
			return Task{}, false, err
		}
		n := int32(0)
		for _, d := range st.DependsOn {
			if !done[d] {
				n++
			}
		}
		names, newIDs, waiting = append(names, st.Step), append(newIDs, id), append(waiting, n)
	}
	rows, err = tx.Query(ctx, recreateSteps, wfID, names, newIDs, waiting, deadID)
	if err != nil {
		return Task{}, false, err
	}
	created, err := s.collectTasks(rows)
	if err != nil {
		return Task{}, false, err
	}
	if _, err := tx.Exec(ctx, resumeWorkflow, wfID, len(names)); err != nil {
		return Task{}, false, err
	}
	var replay Task
	woken := map[string]bool{}
	for _, t := range created {
		if t.ReplayedFrom != nil && *t.ReplayedFrom == deadID {
			replay = t
		}
		if t.Status == StatusPending && !woken[t.Queue] {
			woken[t.Queue] = true
			if _, err := tx.Exec(ctx, notifyDue, DueChannel, t.Queue); err != nil {
				return Task{}, false, err
			}
		}
	}
	if replay.ID == uuid.Nil {
		return Task{}, false, fmt.Errorf("resume workflow %s: the dead step was not re-created", wfID)
	}
	return replay, true, nil
}

// DeleteExpiredWorkflows deletes up to limit finished workflows every task of
// which is finished and past its queue's retention for its status (defaults where
// the queue sets none), each with all its tasks (and their attempts), and returns
// how many workflows it deleted. A workflow goes whole or not at all. The
// transaction is bounded by timeout.
func (s *Store) DeleteExpiredWorkflows(ctx context.Context, defaults Retention, limit int, timeout time.Duration) (int64, error) {
	n, err := s.deleteWorkflowsWhole(ctx, timeout, expiredWorkflows, defaults.DoneMs, defaults.CancelledMs, defaults.DeadMs, limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired workflows: %w", err)
	}
	return n, nil
}

// deleteWorkflowsWhole runs selectIDs (a statement answering workflow ids) with args
// and deletes those workflows whole, in one transaction bounded by timeout on the
// server, and returns how many it deleted. Retention's two ways out of a finished
// workflow (its queue's ages, its history day) share it.
func (s *Store) deleteWorkflowsWhole(ctx context.Context, timeout time.Duration, selectIDs string, args ...any) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setRetentionTimeouts, strconv.FormatInt(max(ms(timeout), 1), 10)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, selectIDs, args...)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil || len(ids) == 0 {
			return err
		}
		tag, err := tx.Exec(ctx, deleteWorkflows, ids)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}
