package lifecycle

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/taskforge/taskforge/internal/crashpoint"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Dispatch moves up to limit due pending and retry tasks of queue to buffered and
// adds them to the queue's buffer with weight (buffer.LevelWeightMs of the queue's
// aging), and reports how many it moved. The dispatcher decides which queues and
// how many (package dispatcher); this is the transition. The buffer's ZADD follows
// the commit: when it fails, or the replica dies between the two, the tasks stay
// buffered in PostgreSQL without an entry, the count still includes them, and the
// dispatcher's repair pass re-adds them.
func (l *Lifecycle) Dispatch(ctx context.Context, queue string, limit int, weight int64) (int, error) {
	tasks, err := l.store.DispatchDue(ctx, queue, limit, weight)
	if err != nil {
		return 0, err
	}
	for _, t := range tasks {
		l.tel.Transition(telemetry.Transition{TaskID: t.ID, Queue: queue, From: t.FromStatus, To: storage.StatusBuffered})
		l.tel.TaskSpan("taskforge.dispatch", t.Traceparent,
			attribute.String("taskforge.task_id", t.ID.String()), attribute.String("taskforge.queue", queue))
	}
	if len(tasks) > 0 {
		crashpoint.Hit(crashpoint.AfterDispatchCommit)
	}
	if err := l.buf.Add(ctx, queue, tasks, weight); err != nil {
		return len(tasks), err
	}
	return len(tasks), nil
}
