package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/taskforge/taskforge/internal/crashpoint"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// AckOutcome is the outcome of one ack of a batch: the done task, or the error
// (storage.ErrLeaseLost, wrapped) that the ack alone would have met.
type AckOutcome struct {
	Task storage.Task
	Err  error
}

// Ack ends an executing attempt as succeeded, through the group commit shared with
// concurrent acks. It returns storage.ErrLeaseLost (wrapped) when item's lease is no
// longer held, or an error of the group commit (ErrCommitTimeout: the outcome is
// unknown) when the commit failed as a whole.
func (l *Lifecycle) Ack(ctx context.Context, item storage.AckItem) (storage.Task, error) {
	outcomes, err := l.AckMany(ctx, item.WorkerID, []storage.AckItem{item}, true)
	if err != nil {
		return storage.Task{}, err
	}
	return outcomes[0].Task, outcomes[0].Err
}

// AckMany acks items of one worker in one (group) commit and returns one outcome per
// item, in order: each item succeeds or fails (lease lost) on its own. An error
// means the commit itself failed: nothing was acked, or, when it timed out, nobody
// knows. Workflow steps the acks unblock are released by the statement itself; they
// and the workflows the acks end are logged and counted here (stepEffects).
//
// Without withTasks (a poll's acks, a batch's with the minimal answer) the Task of
// an outcome holds only what storage.Store.AckMany reads back with refs, unless an
// item is a workflow step's; such calls share commits with each other only.
func (l *Lifecycle) AckMany(ctx context.Context, workerID string, items []storage.AckItem, withTasks bool) ([]AckOutcome, error) {
	commit := l.ackRefs
	if withTasks {
		commit = l.acks
	}
	outcomes, err := commit.do(ctx, items...)
	if err != nil {
		return nil, fmt.Errorf("ack %d tasks: %w", len(items), err)
	}
	return l.acked(ctx, workerID, outcomes), nil
}

// acked runs the follow-ups of committed acks (finished) and returns their outcomes.
func (l *Lifecycle) acked(ctx context.Context, workerID string, outcomes []ackOutcome) []AckOutcome {
	crashpoint.Hit(crashpoint.AfterAckCommit)
	out := make([]AckOutcome, len(outcomes))
	for i, o := range outcomes {
		out[i] = AckOutcome{Task: o.task, Err: o.err}
		if o.err == nil {
			l.finished(ctx, o.task, workerID, "")
		}
	}
	return out
}

// Nack ends an executing attempt as failed: the task retries (after n.RetryAfterMs,
// when set), dies, or ends cancelled when a cancel was requested. A retry is handed
// to the dispatcher's planning at once rather than on its next tick.
func (l *Lifecycle) Nack(ctx context.Context, n storage.Nack) (storage.Task, error) {
	t, err := l.store.Nack(ctx, n)
	if err != nil {
		return storage.Task{}, fmt.Errorf("nack task %s: %w", n.TaskID, err)
	}
	l.finished(ctx, t, n.WorkerID, "")
	if t.Status == storage.StatusRetry {
		// Let the dispatcher plan for this retry: now if it is due, else for when
		// its backoff ends, rather than on its next tick.
		l.due(t.Queue)
	}
	return t, nil
}

// Release ends an executing attempt as released, without spending the task's retry
// budget: the task goes back in line, after r.DelayMs when set (a snooze).
func (l *Lifecycle) Release(ctx context.Context, r storage.Release) (storage.Task, error) {
	t, err := l.store.Release(ctx, r)
	if err != nil {
		return storage.Task{}, fmt.Errorf("release task %s: %w", r.TaskID, err)
	}
	l.released(ctx, t, r.WorkerID)
	return t, nil
}

// released reports a released task and lets the dispatcher put it back in the
// buffer now rather than on its next tick, or, for a snoozed task, plan its next
// pass for when the snooze ends.
func (l *Lifecycle) released(ctx context.Context, t storage.Task, workerID string) {
	l.finished(ctx, t, workerID, "released")
	if t.Status == storage.StatusPending {
		l.due(t.Queue)
	}
}

// finished is the follow-up of an attempt that ended through a worker's report: the
// transition log, the waiters of a finished task, the span, the slot it held, and
// what the statement did to the task's workflow.
func (l *Lifecycle) finished(ctx context.Context, t storage.Task, workerID, reason string) {
	var took time.Duration
	if t.AttemptStartedAt != nil {
		took = t.UpdatedAt.Sub(*t.AttemptStartedAt) // both on the database clock
	}
	l.tel.Transition(ofStep(t, telemetry.Transition{TaskID: t.ID, Queue: t.Queue, WorkerID: workerID,
		From: storage.StatusExecuting, To: t.Status, Attempt: t.Attempts, Duration: took, Reason: reason}))
	if Terminal(t.Status) {
		l.announceEnded(ctx, t.ID)
	}
	span := "taskforge.nack"
	switch {
	case t.Status == storage.StatusDone:
		span = "taskforge.ack"
	case reason == "released":
		span = "taskforge.release"
	}
	l.tel.TaskSpan(span, t.Traceparent, append(taskAttrs(t, workerID), attribute.String("taskforge.status", t.Status))...)
	l.releaseTask(context.WithoutCancel(ctx), t.Queue, t.Group, t.ID)
	if t.Effects != nil {
		l.stepEffects(ctx, t.ID, t.Queue, t.WorkflowID, t.Step, t.Effects)
	}
}

// Reclaim ends up to limit attempts whose lease expired (abandoned) or whose timeout
// passed (timed_out), as the watchdog asks: each task retries, dies, or ends
// cancelled when a cancel was requested. It frees the slots the lost attempts held,
// tells the dispatcher of the retries and the waiters of the tasks that ended, and
// returns what it ended.
func (l *Lifecycle) Reclaim(ctx context.Context, limit int) ([]storage.Reclaimed, error) {
	ended, err := l.store.ReclaimExpired(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("reclaim expired leases: %w", err)
	}
	bg := context.WithoutCancel(ctx)
	var finished []uuid.UUID // dead or cancelled: their waiters are told
	for _, r := range ended {
		if r.Status != storage.StatusRetry {
			finished = append(finished, r.TaskID)
		}
		l.due(r.Queue)                                // a retry scheduled by the reclaim: plan for it
		l.releaseTask(bg, r.Queue, r.Group, r.TaskID) // the slots the lost attempt held
		l.tel.Reclaimed(r.Queue, r.Outcome)
		tr := telemetry.Transition{TaskID: r.TaskID, Queue: r.Queue, WorkerID: r.WorkerID,
			From: storage.StatusExecuting, To: r.Status, Attempt: r.Attempt, Duration: r.EndedAt.Sub(r.StartedAt),
			Reason: r.Outcome}
		if r.WorkflowID != nil && r.Step != nil {
			tr.WorkflowID, tr.Step = *r.WorkflowID, *r.Step
		}
		l.tel.Transition(tr)
		if r.Effects != nil {
			l.stepEffects(bg, r.TaskID, r.Queue, r.WorkflowID, r.Step, r.Effects)
		}
	}
	l.announceEnded(bg, finished...)
	return ended, nil
}
