package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
)

// Heartbeat extends the lease workerID holds on a task by lease, never past the
// attempt's deadline, and, when progress is not nil, stores it as the attempt's
// progress (JSON null clears it). It returns storage.ErrLeaseLost (wrapped),
// changing nothing, unless token is the task's current, unexpired lease. The
// task's status does not change; the lease answers whether a cancel was requested.
func (l *Lifecycle) Heartbeat(ctx context.Context, workerID string, taskID, token uuid.UUID, lease time.Duration,
	progress json.RawMessage) (storage.Lease, error) {
	var held storage.Lease
	var err error
	if progress != nil {
		held, err = l.store.HeartbeatProgress(ctx, workerID, taskID, token, lease, progress)
	} else {
		held, err = l.store.Heartbeat(ctx, workerID, taskID, token, lease)
	}
	if err != nil {
		return storage.Lease{}, fmt.Errorf("heartbeat: %w", err)
	}
	return held, nil
}

// HeartbeatMany extends, in one statement, every lease of refs that workerID
// holds by lease, and returns those it extended keyed by task id; a lease not held
// changes nothing and has no entry.
func (l *Lifecycle) HeartbeatMany(ctx context.Context, workerID string, refs []storage.LeaseRef,
	lease time.Duration) (map[uuid.UUID]storage.Lease, error) {
	held, err := l.store.HeartbeatMany(ctx, workerID, refs, lease)
	if err != nil {
		return nil, fmt.Errorf("heartbeat %d leases: %w", len(refs), err)
	}
	return held, nil
}
