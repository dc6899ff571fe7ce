package lifecycle

import (
	"context"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/attribute"

	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Enqueue stores tasks in queue under an enqueue span that continues ctx's trace
// (the producer's, see telemetry.FromHeader), records that span's traceparent with
// each task, and reports the tasks it created (an idempotent repeat creates none).
// The statement's NOTIFY tells the dispatchers; with Config.WakeOnEnqueue, this
// replica's dispatcher is also told directly.
func (l *Lifecycle) Enqueue(ctx context.Context, queue string, tasks []storage.NewTask) ([]storage.Enqueued, error) {
	ctx, span := l.tel.StartSpan(ctx, "taskforge.enqueue",
		attribute.String("taskforge.queue", queue), attribute.Int("taskforge.tasks", len(tasks)))
	defer span.End()
	out, err := l.store.Enqueue(ctx, queue, tasks, telemetry.Traceparent(ctx))
	if err != nil {
		span.RecordError(err)
		return nil, fmt.Errorf("enqueue %d tasks in queue %s: %w", len(tasks), queue, err)
	}
	created := false
	for _, e := range out {
		if e.Created {
			created = true
			l.tel.Transition(telemetry.Transition{TaskID: e.Task.ID, Queue: e.Task.Queue, To: storage.StatusPending})
		}
	}
	if created {
		l.enqueued(queue)
	}
	return out, nil
}

// SubmitWorkflow stores workflow w, its steps pending or blocked on their parents,
// under a submit span that continues ctx's trace (the steps' spans join it), and
// reports the steps when it created them (a repeat of an idempotent submission
// creates none and returns the workflow as it is).
func (l *Lifecycle) SubmitWorkflow(ctx context.Context, w storage.NewWorkflow) (storage.SubmittedWorkflow, error) {
	ctx, span := l.tel.StartSpan(ctx, "taskforge.workflow.submit",
		attribute.String("taskforge.workflow_id", w.ID.String()), attribute.Int("taskforge.steps", len(w.Steps)))
	defer span.End()
	w.Traceparent = telemetry.Traceparent(ctx)
	out, err := l.store.SubmitWorkflow(ctx, w)
	if err != nil {
		span.RecordError(err)
		return storage.SubmittedWorkflow{}, fmt.Errorf("submit workflow %s: %w", w.ID, err)
	}
	if !out.Created {
		return out, nil
	}
	l.tel.WorkflowTransition(telemetry.WorkflowChange{WorkflowID: out.Workflow.ID, To: storage.WorkflowRunning})
	var woken []string
	for _, st := range out.Workflow.Steps {
		l.tel.Transition(telemetry.Transition{TaskID: st.TaskID, Queue: *st.Queue, To: *st.Status,
			WorkflowID: out.Workflow.ID, Step: st.Step})
		if *st.Status == storage.StatusPending && !slices.Contains(woken, *st.Queue) {
			woken = append(woken, *st.Queue)
		}
	}
	for _, q := range woken {
		l.enqueued(q)
	}
	return out, nil
}

// enqueued tells this replica's dispatcher of new work in queue when nothing else
// would before its sweep (Config.WakeOnEnqueue).
func (l *Lifecycle) enqueued(queue string) {
	if l.cfg.WakeOnEnqueue {
		l.due(queue)
	}
}
