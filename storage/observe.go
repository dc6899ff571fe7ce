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
