package lifecycle

import (
	"context"
)

// Dispatch moves up to limit due pending and retry tasks of queue to buffered and
// adds them to the queue's buffer with weight (buffer.LevelWeightMs of the queue's
// aging) through toBuffer, and reports how many it moved, the count including those
// whose ZADD failed (the repair pass re-adds them). The dispatcher decides which
// queues and how many (package dispatcher); this is the transition.
func (l *Lifecycle) Dispatch(ctx context.Context, queue string, limit int, weight int64) (int, error) {
	tasks, err := l.store.DispatchDue(ctx, queue, limit, weight)
	if err != nil {
		return 0, err
	}
	if err := l.toBuffer(ctx, queue, tasks, weight); err != nil {
		return len(tasks), err
	}
	return len(tasks), nil
}
