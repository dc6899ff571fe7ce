package lifecycle

import (
	"context"
	"fmt"
	"time"
)

// DeleteExpiredTasks deletes up to limit done or cancelled tasks outside a workflow
// that finished more than olderThan ago, with their attempts, in one transaction
// bounded by timeout on the server, and returns how many it deleted. Retention is
// the last transition of a finished task: nothing follows it in Redis, whose
// entries of a finished task are gone already.
func (l *Lifecycle) DeleteExpiredTasks(ctx context.Context, olderThan time.Duration, limit int, timeout time.Duration) (int64, error) {
	n, err := l.store.DeleteExpiredTasks(ctx, olderThan, limit, timeout)
	if err != nil {
		return n, fmt.Errorf("delete expired tasks: %w", err)
	}
	return n, nil
}

// DeleteExpiredWorkflows deletes up to limit workflows that finished more than
// olderThan ago and hold no unfinished or dead task, whole with their tasks, in one
// transaction bounded by timeout, and returns how many it deleted.
func (l *Lifecycle) DeleteExpiredWorkflows(ctx context.Context, olderThan time.Duration, limit int, timeout time.Duration) (int64, error) {
	n, err := l.store.DeleteExpiredWorkflows(ctx, olderThan, limit, timeout)
	if err != nil {
		return n, fmt.Errorf("delete expired workflows: %w", err)
	}
	return n, nil
}
