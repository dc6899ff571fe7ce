package lifecycle

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Replay creates a new pending task from each dead task of queue that ids name (or
// every dead task, with all), each with replayed_from set; the dead ones keep their
// history. It tells the dispatcher the queue has work due now. The dead step of a
// failed workflow resumes its workflow instead, which is logged and counted
// (taskforge_workflows_total{event="resumed"}).
func (l *Lifecycle) Replay(ctx context.Context, queue string, ids []uuid.UUID, all bool) ([]storage.Task, error) {
	tasks, err := l.store.Replay(ctx, queue, ids, all)
	if err != nil {
		return nil, fmt.Errorf("replay dead tasks of queue %s: %w", queue, err)
	}
	for _, t := range tasks {
		l.tel.Transition(ofStep(t, telemetry.Transition{TaskID: t.ID, Queue: t.Queue, To: t.Status,
			Reason: "replay of " + t.ReplayedFrom.String()}))
		if t.WorkflowID != nil && t.Step != nil { // the dead step of a failed workflow: it resumed
			l.tel.WorkflowTransition(telemetry.WorkflowChange{WorkflowID: *t.WorkflowID, From: storage.WorkflowFailed,
				To: storage.WorkflowRunning, TaskID: t.ID, Queue: t.Queue, Step: *t.Step,
				Reason: "replay of dead step " + *t.Step + " (" + t.ReplayedFrom.String() + ")"})
		}
	}
	l.due(queue)
	return tasks, nil
}
