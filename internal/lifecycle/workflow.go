package lifecycle

import (
	"context"
	"slices"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// stepEffects is the follow-up of what the end of task id (of queue, step step of
// workflow wf) did to its workflow inside its own statement (storage.StepEffects):
// a transition log line for each step unblocked (blocked → pending) and each step
// the cascade cancelled, the cancelled ones dropped from the buffer and announced
// ended, this replica's dispatcher told of the unblocked when it does not LISTEN,
// and the workflow's end logged and counted. Callers call it only for a non-nil
// fx, so a plain task costs a nil check.
func (l *Lifecycle) stepEffects(ctx context.Context, id uuid.UUID, queue string, wf *uuid.UUID, step *string, fx *storage.StepEffects) {
	var wfID uuid.UUID
	var stepName string
	if wf != nil && step != nil {
		wfID, stepName = *wf, *step
	}
	var woken []string
	for _, u := range fx.Unblocked {
		l.tel.Transition(telemetry.Transition{TaskID: u.ID, Queue: u.Queue, From: storage.StatusBlocked,
			To: storage.StatusPending, Reason: "dependencies done", WorkflowID: wfID, Step: u.Step})
		if l.cfg.WakeOnEnqueue && !slices.Contains(woken, u.Queue) {
			woken = append(woken, u.Queue)
			l.due(u.Queue)
		}
	}
	if len(fx.Cascaded) > 0 {
		reason := "workflow step " + stepName + " died"
		if fx.WorkflowEnded == storage.WorkflowCancelled {
			reason = "workflow step " + stepName + " was cancelled"
		}
		l.stepsCancelled(ctx, fx.Cascaded, reason)
	}
	if fx.WorkflowEnded != "" {
		reason := "step " + stepName + " done"
		switch fx.WorkflowEnded {
		case storage.WorkflowFailed:
			reason = "step " + stepName + " died"
		case storage.WorkflowCancelled:
			reason = "step " + stepName + " cancelled"
		}
		l.tel.WorkflowTransition(telemetry.WorkflowChange{WorkflowID: wfID, From: storage.WorkflowRunning,
			To: fx.WorkflowEnded, TaskID: id, Queue: queue, Step: stepName, Reason: reason})
	}
}
