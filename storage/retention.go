package storage

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention: deleting finished history in small batches (used by package janitor).
// Each batch is its own short transaction whose statement and lock waits are
// bounded by a server-side timeout, and SKIP LOCKED passes over rows another
// transaction holds, so a batch never waits on live traffic and live traffic waits
// on a batch for at most that batch's duration.

// DeleteExpiredTasks deletes up to limit done or cancelled tasks, of any queue,
// whose finished_at is more than olderThan ago on the database clock, oldest first,
// together with their attempts, and returns how many tasks it deleted. Dead tasks are
// never deleted here (only a discard removes them). The transaction is bounded by
// timeout.
func (s *Store) DeleteExpiredTasks(ctx context.Context, olderThan time.Duration, limit int, timeout time.Duration) (int64, error) {
	n, err := s.shortDelete(ctx, timeout, deleteExpiredTasks, ms(olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired tasks: %w", err)
	}
	return n, nil
}

// DeleteSilentWorkers deletes up to limit workers whose last heartbeat or poll is
// more than olderThan ago on the database clock, and returns how many it deleted. A
// worker that comes back is recorded afresh by its next poll or heartbeat. The
// transaction is bounded by timeout.
func (s *Store) DeleteSilentWorkers(ctx context.Context, olderThan time.Duration, limit int, timeout time.Duration) (int64, error) {
	n, err := s.shortDelete(ctx, timeout, deleteSilentWorkers, ms(olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("delete silent workers: %w", err)
	}
	return n, nil
}

// shortDelete runs one DELETE in its own transaction whose statement_timeout and
// lock_timeout are both timeout, and returns the rows it deleted.
func (s *Store) shortDelete(ctx context.Context, timeout time.Duration, sql string, args ...any) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setRetentionTimeouts, strconv.FormatInt(max(ms(timeout), 1), 10)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, sql, args...)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}
