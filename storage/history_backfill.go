package storage

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// The mover of databases upgraded from a release without history (package
// backfill): finished tasks that such a release left in tasks move into history in
// batches that read its heap in order, a range of blocks each. See move_finished_batch.

var (
	moveFinishedBatch            = mustLoad("move_finished_batch")
	finishedInTasks              = mustLoad("finished_in_tasks")
	ensureHistoryPartitionsSince = mustLoad("ensure_history_partitions_since")
	finishedIndexesLeft          = mustLoad("finished_indexes_left")
	dropFinishedIndex            = map[string]string{
		"tasks_dead_idx":        mustLoad("drop_tasks_dead_idx"),
		"tasks_finished_idx":    mustLoad("drop_tasks_finished_idx"),
		"tasks_idempotency_idx": mustLoad("drop_tasks_idempotency_idx"),
	}
)

// MoveBatch is what one MoveFinishedBatch did.
type MoveBatch struct {
	Moved    int64 // finished tasks moved into history
	Attempts int64 // their attempts, moved with them
	// Blocks is the size of tasks in blocks after the batch: a pass that reads
	// from block 0 is over when the next batch would start there.
	Blocks int64
}

// FinishedInTasks returns how many finished tasks (done, cancelled, dead) are still
// in tasks, and the oldest one's finished_at (zero when there is none).
func (s *Store) FinishedInTasks(ctx context.Context) (int64, time.Time, error) {
	var n int64
	var oldest *time.Time
	if err := s.pool.QueryRow(ctx, finishedInTasks).Scan(&n, &oldest); err != nil {
		return 0, time.Time{}, fmt.Errorf("count finished tasks outside history: %w", err)
	}
	if oldest == nil {
		return n, time.Time{}, nil
	}
	return n, oldest.UTC(), nil
}

// EnsureHistoryPartitionsSince creates history's day partitions for every UTC day
// from since's to today (on the Store's clock) that has none, under lockTimeout
// (creating a partition locks its parent for the catalog change), and returns how
// many it created.
func (s *Store) EnsureHistoryPartitionsSince(ctx context.Context, since time.Time, lockTimeout time.Duration) (int, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setRetentionTimeouts, strconv.FormatInt(max(ms(lockTimeout), 1), 10)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, ensureHistoryPartitionsSince, since, s.now()).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("ensure history partitions since %s: %w", since.Format(time.DateOnly), err)
	}
	return int(n), nil
}

// MoveFinishedBatch moves the finished tasks in blocks [from, from+blocks) of tasks'
// heap into history with their attempts, in one transaction whose statement and
// lock waits timeout bounds. It locks the finished rows it moves and nothing else of
// the live queue; a finished row that another transaction holds is skipped (a later
// pass takes it).
func (s *Store) MoveFinishedBatch(ctx context.Context, from, blocks int64, timeout time.Duration) (MoveBatch, error) {
	var b MoveBatch
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setRetentionTimeouts, strconv.FormatInt(max(ms(timeout), 1), 10)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, moveFinishedBatch, from, blocks).Scan(&b.Moved, &b.Attempts, &b.Blocks)
	})
	if err != nil {
		return MoveBatch{}, fmt.Errorf("move finished tasks of blocks %d to %d into history: %w", from, from+blocks, err)
	}
	return b, nil
}

// DropFinishedIndexes drops the indexes of tasks that only finished rows need
// (migration 0027: tasks_dead_idx, tasks_finished_idx, tasks_idempotency_idx) that
// are still there, one DROP INDEX CONCURRENTLY each, so the queue's writes go on
// meanwhile; it returns the names it dropped. The caller runs it once tasks holds no
// finished row. Idempotent: with none left it costs one catalog read; one whose drop
// was interrupted (left invalid) goes on the next call.
func (s *Store) DropFinishedIndexes(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, finishedIndexesLeft)
	if err != nil {
		return nil, fmt.Errorf("list the indexes of finished tasks left on tasks: %w", err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the indexes of finished tasks left on tasks: %w", err)
	}
	var dropped []string
	for _, name := range left {
		stmt, ok := dropFinishedIndex[name]
		if !ok {
			return dropped, fmt.Errorf("drop index %s: no statement for it", name)
		}
		// the simple protocol: one statement outside any transaction, as CONCURRENTLY requires
		if _, err := s.pool.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
			return dropped, fmt.Errorf("drop index %s of finished tasks: %w", name, err)
		}
		dropped = append(dropped, name)
	}
	return dropped, nil
}
