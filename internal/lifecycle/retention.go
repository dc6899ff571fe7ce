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
