package lifecycle

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Cancel cancels task id of queue: a waiting task (pending, buffered, retry or
// blocked) ends cancelled at once, and its buffer entry is dropped; an executing one
// is flagged cancel_requested (its status stays executing) and its worker hears of
// it on its next heartbeat. It returns storage.ErrTaskNotCancellable (wrapped) for
// a finished task.
func (l *Lifecycle) Cancel(ctx context.Context, queue string, id uuid.UUID) (storage.Cancelled, error) {
	t, err := l.store.CancelTask(ctx, queue, id)
	if err != nil {
		return storage.Cancelled{}, fmt.Errorf("cancel task %s: %w", id, err)
	}
	if t.Status == storage.StatusExecuting {
		return t, nil
	}
	l.tel.Transition(ofStep(t.Task, telemetry.Transition{TaskID: t.ID, Queue: queue, From: t.FromStatus,
		To: storage.StatusCancelled, Attempt: t.Attempts, Reason: "cancelled by request"}))
	l.announceEnded(ctx, id)
	// The buffer may still hold the id; a claim would skip it anyway.
	l.removeBufferedTask(ctx, queue, t.Group, id)
	if t.Effects != nil { // a step: its workflow ended cancelled, its other steps with it
		l.stepEffects(ctx, t.ID, queue, t.WorkflowID, t.Step, t.Effects)
	}
	return t, nil
}

// CancelSelection names the tasks of a bulk cancel: some ids, or every task of
// some statuses (batches of Rows rows per transaction).
type CancelSelection struct {
	IDs      []uuid.UUID
	Statuses []string
	// Rows is the most rows per transaction of a cancel by status; 0 is
	// storage.BulkBatch.
	Rows int
	// AfterBatch, when set, hears of each committed batch's rows (tests).
	AfterBatch func(rows int)
}

// CancelMany cancels the tasks of queue that sel names, as Cancel would each, and
// returns how many ended cancelled and how many, executing, had a cancel requested.
// When it fails, the batches before the failure stay committed and are counted.
func (l *Lifecycle) CancelMany(ctx context.Context, queue string, sel CancelSelection) (cancelled, requested int, err error) {
	each := func(batch []storage.BulkCancelled) {
		if sel.AfterBatch != nil {
			sel.AfterBatch(len(batch))
		}
		var ended, buffered []uuid.UUID
		var steps []storage.BulkCancelled // those whose end changed their workflows
		for _, t := range batch {
			if t.Effects != nil {
				steps = append(steps, t)
			}
			if t.FromStatus == storage.StatusExecuting {
				requested++
				continue
			}
			cancelled++
			ended = append(ended, t.ID)
			if t.FromStatus == storage.StatusBuffered {
				buffered = append(buffered, t.ID)
			}
			tr := telemetry.Transition{TaskID: t.ID, Queue: queue, From: t.FromStatus,
				To: storage.StatusCancelled, Attempt: t.Attempts, Reason: "cancelled by bulk request"}
			if t.WorkflowID != nil && t.Step != nil {
				tr.WorkflowID, tr.Step = *t.WorkflowID, *t.Step
			}
			l.tel.Transition(tr)
		}
		bg := context.WithoutCancel(ctx)
		l.removeCancelled(bg, queue, buffered...)
		l.announceEnded(bg, ended...)
		for _, t := range steps {
			l.stepEffects(bg, t.ID, queue, t.WorkflowID, t.Step, t.Effects)
		}
	}
	if sel.Statuses != nil {
		_, err = l.store.CancelWaiting(ctx, queue, sel.Statuses, sel.Rows, each)
	} else {
		var batch []storage.BulkCancelled
		if batch, err = l.store.CancelTasks(ctx, queue, sel.IDs); err == nil && len(batch) > 0 {
			each(batch)
		}
	}
	if err != nil {
		return cancelled, requested, fmt.Errorf("cancel tasks of queue %s: %w", queue, err)
	}
	return cancelled, requested, nil
}

// CancelWorkflow cancels workflow id: its waiting steps end cancelled (their buffer
// entries dropped, their waiters told) and its executing steps have a cancel
// requested, which their workers hear on their next heartbeat.
func (l *Lifecycle) CancelWorkflow(ctx context.Context, id uuid.UUID) (storage.Workflow, error) {
	w, changed, err := l.store.CancelWorkflow(ctx, id)
	if err != nil {
		return storage.Workflow{}, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	l.stepsCancelled(ctx, changed, "workflow cancelled by request")
	l.tel.WorkflowTransition(telemetry.WorkflowChange{WorkflowID: id, From: storage.WorkflowRunning,
		To: storage.WorkflowCancelled, Reason: "cancelled by request"})
	return w, nil
}

// stepsCancelled reports the step tasks a workflow's cancellation (or a failure
// cascade) changed, tells their waiters of the cancelled ones, and keeps those from
// taking a poll's place in the buffer.
func (l *Lifecycle) stepsCancelled(ctx context.Context, changed []storage.CancelledStep, reason string) {
	ctx = context.WithoutCancel(ctx)
	buffered := map[string][]uuid.UUID{}
	var ended []uuid.UUID
	for _, t := range changed {
		if t.FromStatus == storage.StatusExecuting {
			continue // the worker hears of it on its next heartbeat
		}
		ended = append(ended, t.ID)
		if t.FromStatus == storage.StatusBuffered {
			buffered[t.Queue] = append(buffered[t.Queue], t.ID)
		}
		tr := telemetry.Transition{TaskID: t.ID, Queue: t.Queue, From: t.FromStatus, To: storage.StatusCancelled,
			Attempt: t.Attempts, Reason: reason}
		if t.WorkflowID != nil && t.Step != nil {
			tr.WorkflowID, tr.Step = *t.WorkflowID, *t.Step
		}
		l.tel.Transition(tr)
	}
	for q, ids := range buffered {
		l.removeCancelled(ctx, q, ids...)
	}
	l.announceEnded(ctx, ended...)
}

// removeCancelled drops cancelled tasks that were buffered from queue's buffer; for a
// fair queue, from their groups' buffers, once it has read their groups (one read of
// the ids, never of the queue). What it cannot drop stays until a claim skips it.
func (l *Lifecycle) removeCancelled(ctx context.Context, queue string, ids ...uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	limits, ok, err := l.limits.Get(ctx, queue)
	if err != nil || !ok || !limits.Fair {
		l.removeBuffered(ctx, queue, ids...)
		return
	}
	slots, err := l.store.GroupsOf(ctx, queue, ids)
	if err == nil {
		err = l.buf.RemoveGrouped(ctx, queue, slots, buffer.LevelWeightMs(limits.AgingMs))
	}
	if err != nil {
		l.log.Warn("cancelled tasks left in a fair queue's buffer; claims drop them", "queue", queue, "tasks", len(ids), "err", err)
	}
}
