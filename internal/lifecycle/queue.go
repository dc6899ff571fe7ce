package lifecycle

import (
	"context"
	"fmt"

	"github.com/taskforge/taskforge/storage"
)

// resumeWake is how many parked polls a resume wakes on every replica.
const resumeWake = 1000

// CreateQueue creates queue q and makes its settings take effect here at once;
// other replicas learn of it within ratelimit.RefreshInterval. It returns
// storage.ErrQueueExists (wrapped) when the name is taken.
func (l *Lifecycle) CreateQueue(ctx context.Context, q storage.Queue) (storage.Queue, error) {
	created, err := l.store.CreateQueue(ctx, q)
	if err != nil {
		return storage.Queue{}, fmt.Errorf("create queue %s: %w", q.Name, err)
	}
	l.limits.Set(created)
	return created, nil
}

// ChangeQueue applies change to queue name (pause, resume, limits, push target) and
// makes it take effect here at once; other replicas follow within
// ratelimit.RefreshInterval. A changed concurrency cap rebuilds the queue's slots
// before the next pop; a resume dispatches what waited in PostgreSQL and wakes the
// parked polls of every replica.
func (l *Lifecycle) ChangeQueue(ctx context.Context, name string, change func(*storage.Queue) error) (storage.Queue, error) {
	var before storage.Queue
	q, err := l.store.UpdateQueue(ctx, name, func(q *storage.Queue) error {
		before = *q
		return change(q)
	})
	if err != nil {
		return storage.Queue{}, fmt.Errorf("change queue %s: %w", name, err)
	}
	l.limits.Set(q)
	if !equalPtr(before.Fairness, q.Fairness) {
		// The tasks buffered in the old layout are re-added to the new one by the
		// dispatcher's repair pass (they stay buffered in PostgreSQL); the old layout
		// goes, slots included, so the next pop rebuilds them.
		var err error
		if before.Fairness != nil {
			err = l.buf.DropFair(ctx, name)
		} else {
			err = l.buf.Drop(ctx, name)
		}
		if err != nil {
			l.log.Warn("could not drop the queue's buffer after its fairness changed; stale entries are dropped by their claims",
				"queue", name, "err", err)
		}
	}
	if !equalPtr(before.MaxConcurrency, q.MaxConcurrency) {
		// The running set is only kept while a cap is on: rebuild it before the next pop.
		if err := l.buf.Unsync(ctx, name); err != nil {
			l.log.Warn("could not reset concurrency slots", "queue", name, "err", err)
		}
	}
	if before.Paused && !q.Paused {
		l.due(name) // dispatch what waited in PostgreSQL
		if err := l.buf.Wake(ctx, name, resumeWake); err != nil {
			l.log.Warn("could not wake pollers after resume", "queue", name, "err", err)
		}
	}
	return q, nil
}

// DeleteQueue deletes queue name with its tasks, forgets its settings and drops its
// buffer. A buffer that cannot be dropped is logged: nothing claims from a deleted
// queue.
func (l *Lifecycle) DeleteQueue(ctx context.Context, name string) error {
	limits, _, _ := l.limits.Get(ctx, name)
	if err := l.store.DeleteQueue(ctx, name); err != nil {
		return fmt.Errorf("delete queue %s: %w", name, err)
	}
	l.limits.Forget(name)
	drop := l.buf.Drop
	if limits.Fair {
		drop = l.buf.DropFair
	}
	if err := drop(ctx, name); err != nil {
		l.log.Warn("queue deleted but its buffer was not dropped", "queue", name, "err", err)
	}
	return nil
}

func equalPtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
