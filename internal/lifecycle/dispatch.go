package lifecycle

import (
	"context"

	"github.com/taskforge/taskforge/storage"
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
	if err := l.toBuffer(ctx, queue, tasks, weight, false); err != nil {
		return len(tasks), err
	}
	return len(tasks), nil
}

// DispatchGroups is Dispatch for a fair queue: it moves, for each pick, up to its N
// due tasks of its group and priority to buffered and into their groups' buffers,
// and reports how many it moved (as Dispatch). The dispatcher picks the groups so
// that every group with due work stays reachable; this is the transition.
func (l *Lifecycle) DispatchGroups(ctx context.Context, queue string, picks []storage.GroupPick, weight int64) (int, error) {
	tasks, err := l.store.DispatchDueGrouped(ctx, queue, picks)
	if err != nil {
		return 0, err
	}
	if err := l.toBuffer(ctx, queue, tasks, weight, true); err != nil {
		return len(tasks), err
	}
	return len(tasks), nil
}
