package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// LeaseRef names one lease: a task and the token of its current attempt.
type LeaseRef struct {
	TaskID     uuid.UUID
	LeaseToken uuid.UUID
}

// HeartbeatMany extends, in one statement, every lease of refs that workerID
// holds, each never past its attempt's deadline, and returns the leases it
// extended keyed by task id. A lease not held (stale token, another worker,
// expired, or the task no longer executing) changes nothing and has no entry.
func (s *Store) HeartbeatMany(ctx context.Context, workerID string, refs []LeaseRef, lease time.Duration) (map[uuid.UUID]Lease, error) {
	ids := make([]uuid.UUID, len(refs))
	tokens := make([]uuid.UUID, len(refs))
	for i, r := range refs {
		ids[i], tokens[i] = r.TaskID, r.LeaseToken
	}
	rows, err := s.hot.Query(ctx, heartbeatTasks, ids, tokens, workerID, ms(lease), s.now())
	if err != nil {
		return nil, fmt.Errorf("heartbeat %d tasks: %w", len(refs), err)
	}
	defer rows.Close()
	out := make(map[uuid.UUID]Lease, len(refs))
	for rows.Next() {
		var id uuid.UUID
		var l Lease
		if err := rows.Scan(&id, &l.ExpiresAt, &l.CancelRequested); err != nil {
			return nil, fmt.Errorf("heartbeat %d tasks: %w", len(refs), err)
		}
		out[id] = l
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heartbeat %d tasks: %w", len(refs), err)
	}
	return out, nil
}
