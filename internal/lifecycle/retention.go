package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/taskforge/taskforge/storage"
)

// DeleteExpiredTasks deletes up to limit finished tasks outside a workflow that
// their queue's retention has passed (defaults where it sets none), with their attempts, in one transaction
// bounded by timeout on the server, and returns how many it deleted. Retention is
// the last transition of a finished task: nothing follows it in Redis, whose
// entries of a finished task are gone already.
func (l *Lifecycle) DeleteExpiredTasks(ctx context.Context, defaults storage.Retention, limit int, timeout time.Duration) (int64, error) {
	n, err := l.store.DeleteExpiredTasks(ctx, defaults, limit, timeout)
	if err != nil {
		return n, fmt.Errorf("delete expired tasks: %w", err)
	}
	return n, nil
}

// DeleteExpiredWorkflows deletes up to limit finished workflows all of whose tasks
// their queues' retention has passed, whole with their tasks, in one transaction
// bounded by timeout, and returns how many it deleted.
func (l *Lifecycle) DeleteExpiredWorkflows(ctx context.Context, defaults storage.Retention, limit int, timeout time.Duration) (int64, error) {
	n, err := l.store.DeleteExpiredWorkflows(ctx, defaults, limit, timeout)
	if err != nil {
		return n, fmt.Errorf("delete expired workflows: %w", err)
	}
	return n, nil
}

// DeleteExpiredHistory deletes up to limit finished plain tasks of history that their
// queue's shorter retention has passed (what every queue lets go leaves by the day:
// DetachHistoryDay), with their attempts and keys, in one transaction bounded by
// timeout, and returns how many it deleted.
func (l *Lifecycle) DeleteExpiredHistory(ctx context.Context, defaults storage.Retention, limit int, timeout time.Duration) (int64, error) {
	n, err := l.store.DeleteExpiredHistory(ctx, defaults, limit, timeout)
	if err != nil {
		return n, fmt.Errorf("delete expired history: %w", err)
	}
	return n, nil
}

// DeleteHistoryDayWorkflows deletes up to limit finished workflows with a task in
// day, whole, so that no workflow loses part of itself when the day leaves.
func (l *Lifecycle) DeleteHistoryDayWorkflows(ctx context.Context, day storage.HistoryDay, limit int, timeout time.Duration) (int64, error) {
	n, err := l.store.DeleteHistoryDayWorkflows(ctx, day, limit, timeout)
	if err != nil {
		return n, fmt.Errorf("delete expired workflows: %w", err)
	}
	return n, nil
}

// DetachHistoryDay takes an expired day of history out of the history tables (see
// storage.Store.DetachHistoryDay); DropDetachedHistory then drops it.
func (l *Lifecycle) DetachHistoryDay(ctx context.Context, day storage.HistoryDay, lockTimeout time.Duration) (string, error) {
	out, err := l.store.DetachHistoryDay(ctx, day, lockTimeout)
	if err != nil {
		return out, fmt.Errorf("expire history: %w", err)
	}
	return out, nil
}

// DropDetachedHistory drops the detached days of history with their tasks' tallies
// and keys, and returns them with the tasks each held.
func (l *Lifecycle) DropDetachedHistory(ctx context.Context, timeout time.Duration) ([]storage.HistoryDay, error) {
	days, err := l.store.DropDetachedHistory(ctx, timeout)
	if err != nil {
		return days, fmt.Errorf("expire history: %w", err)
	}
	return days, nil
}
