package lifecycle

import (
	"context"
	"fmt"

	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// FireDueSchedule fires the tick of the most overdue schedule that plan names (the
// scheduler's loop decides when; package scheduler plans the ticks), passing over
// the schedules in skip, and reports ok false when none is due. The statement
// (storage.FireDueSchedule) enqueues the tick's task and advances the schedule in
// one transaction; then, as for TriggerSchedule, the task's transition is logged and
// the dispatcher told its queue has work due, and the tick is counted with its
// lateness. A tick whose idempotency key a task enqueued by hand already holds
// counts as fired and creates nothing.
func (l *Lifecycle) FireDueSchedule(ctx context.Context, plan storage.PlanFunc, skip []string) (storage.Fired, bool, error) {
	f, ok, err := l.store.FireDueSchedule(ctx, plan, skip)
	if err != nil || !ok {
		return f, ok, err
	}
	if !f.Created {
		l.log.Warn("tick's idempotency key already taken; counted as fired", "schedule", f.Schedule.Name, "tick", f.Tick)
		return f, true, nil
	}
	l.tel.ScheduleFired(f.Schedule.Name, f.At.Sub(f.Tick))
	l.scheduled(f.Task, "schedule "+f.Schedule.Name)
	return f, true, nil
}

// TriggerSchedule enqueues the task of schedule name now (its next tick is
// unchanged), with the follow-ups of a fired tick.
func (l *Lifecycle) TriggerSchedule(ctx context.Context, name string) (storage.Task, error) {
	_, task, err := l.store.TriggerSchedule(ctx, name)
	if err != nil {
		return storage.Task{}, fmt.Errorf("trigger schedule %s: %w", name, err)
	}
	l.scheduled(task, "schedule "+name+" triggered")
	return task, nil
}

// scheduled follows up the enqueue of a schedule's task, fired or triggered: its
// transition, and the dispatcher told at once rather than by the statement's NOTIFY
// alone (which a LISTEN-less replica never hears).
func (l *Lifecycle) scheduled(task storage.Task, reason string) {
	l.tel.Transition(telemetry.Transition{TaskID: task.ID, Queue: task.Queue, To: storage.StatusPending, Reason: reason})
	l.due(task.Queue)
}
