package lifecycle

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// StatusDiscarded is the To of the transition a discard logs: the dead task and its
// attempts are deleted, so no row holds this status.
const StatusDiscarded = "discarded"

// Discard deletes dead task id of queue with its attempts, and logs its transition
// from dead to discarded.
func (l *Lifecycle) Discard(ctx context.Context, queue string, id uuid.UUID) error {
	if err := l.store.DiscardDead(ctx, queue, id); err != nil {
		return err
	}
	l.discarded(queue, []uuid.UUID{id})
	return nil
}

// DiscardMany deletes dead tasks of queue with their attempts, those among ids or
// every one when all is set, batch rows per transaction (storage.BulkBatch when
// batch ≤ 0), logging each task's transition and calling each (when not nil) with
// the count of every committed batch. It returns how many it deleted; when ctx
// ends, or a batch fails, the batches committed so far stay.
func (l *Lifecycle) DiscardMany(ctx context.Context, queue string, ids []uuid.UUID, all bool, batch int,
	each func(int)) (int64, error) {
	n, err := l.store.DiscardDeadMany(ctx, queue, ids, all, batch, func(gone []uuid.UUID) {
		l.discarded(queue, gone)
		if each != nil {
			each(len(gone))
		}
	})
	if err != nil {
		return n, fmt.Errorf("discard dead tasks: %w", err)
	}
	return n, nil
}

func (l *Lifecycle) discarded(queue string, ids []uuid.UUID) {
	for _, id := range ids {
		l.tel.Transition(telemetry.Transition{TaskID: id, Queue: queue, From: storage.StatusDead, To: StatusDiscarded})
	}
}
