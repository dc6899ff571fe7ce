package lifecycle

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/crashpoint"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// toBuffer is the one path of tasks from pending (or retry) to buffered, after
// the commit that made them buffered in PostgreSQL: the enqueue's fast path
// (Enqueue, bufferDirectly) and the dispatcher (Dispatch) both end with it. It
// reports each transition and its dispatch span, then adds the tasks to queue's
// buffer with weight (buffer.LevelWeightMs of the queue's aging), a fair queue's
// (fair) to its groups' buffers, and counts them in this replica's idea of the
// buffer's size when the add succeeded. When the add fails, or the replica dies
// before it, the tasks stay buffered in PostgreSQL without an entry, and the
// dispatcher's repair pass re-adds them.
func (l *Lifecycle) toBuffer(ctx context.Context, queue string, tasks []storage.Buffered, weight int64, fair bool) error {
	if len(tasks) == 0 {
		return nil
	}
	for _, t := range tasks {
		l.tel.Transition(telemetry.Transition{TaskID: t.ID, Queue: queue, From: t.FromStatus, To: storage.StatusBuffered})
		l.tel.TaskSpan("taskforge.dispatch", t.Traceparent,
			attribute.String("taskforge.task_id", t.ID.String()), attribute.String("taskforge.queue", queue))
	}
	crashpoint.Hit(crashpoint.AfterDispatchCommit)
	if fair {
		grouped := make([]buffer.GroupedTask, len(tasks))
		for i, t := range tasks {
			grouped[i] = buffer.GroupedTask{Group: t.Group, Buffered: t}
		}
		if err := l.buf.AddGrouped(ctx, queue, grouped, weight); err != nil {
			return err
		}
	} else if err := l.buf.Add(ctx, queue, tasks, weight); err != nil {
		return err
	}
	l.sizes.added(queue, len(tasks)) // only what the buffer now holds
	return nil
}
