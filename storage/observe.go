package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueState is one queue's task counts, for metrics.
type QueueState struct {
	Depth            map[string]int64 // by status, every status present
	OldestPendingAge float64          // seconds; 0 when nothing is waiting
}

// QueueStates returns every queue's task counts by status.
func (s *Store) QueueStates(ctx context.Context) (map[string]QueueState, error) {
	rows, err := s.pool.Query(ctx, depthByQueue, Statuses)
	if err != nil {
		return nil, fmt.Errorf("queue states: %w", err)
	}
	out := map[string]QueueState{}
	var queue, status string
	var count int64
	var oldest float64
	_, err = pgx.ForEachRow(rows, []any{&queue, &status, &count, &oldest}, func() error {
		st, ok := out[queue]
		if !ok {
			st = QueueState{Depth: make(map[string]int64, len(Statuses)), OldestPendingAge: max(oldest, 0)}
		}
		st.Depth[status] = count
		out[queue] = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue states: %w", err)
	}
	return out, nil
}

// WorkerHeartbeatAges returns, for each worker seen within the window, how long ago
// it last heartbeated.
func (s *Store) WorkerHeartbeatAges(ctx context.Context, window time.Duration) (map[string]time.Duration, error) {
	rows, err := s.pool.Query(ctx, workerHeartbeatAges, ms(window))
	if err != nil {
		return nil, fmt.Errorf("worker heartbeat ages: %w", err)
	}
	out := map[string]time.Duration{}
	var id string
	var age float64
	_, err = pgx.ForEachRow(rows, []any{&id, &age}, func() error {
		out[id] = time.Duration(age * float64(time.Second))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("worker heartbeat ages: %w", err)
	}
	return out, nil
}
