package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// What the dispatcher, the limits cache and the repair pass read: each a statement
// whose cost follows the work (tasks that became due, queues that changed, a page of
// buffered tasks), never one statement per queue.

// NewlyDue returns the unpaused queues holding a waiting task that became due after
// since (on the database clock; the zero time means "ever"), and the database
// clock now, to pass as since next time.
func (s *Store) NewlyDue(ctx context.Context, since time.Time) ([]string, time.Time, error) {
	var queues []string
	var now time.Time
	if err := s.pool.QueryRow(ctx, newlyDue, since).Scan(&queues, &now); err != nil {
		return nil, time.Time{}, fmt.Errorf("queues with newly due tasks: %w", err)
	}
	return queues, now, nil
}

// Now returns the database clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, dbNow).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}

// DueQueues returns every unpaused queue that holds a due pending or retry task.
// Its cost grows with the number of queues (one index probe each): it is the
// periodic sweep's, not a wake-up's.
func (s *Store) DueQueues(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, dueQueues, s.now())
	if err != nil {
		return nil, fmt.Errorf("queues with due tasks: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("queues with due tasks: %w", err)
	}
	return names, nil
}

// QueuesNamed returns the settings of those of names that exist.
func (s *Store) QueuesNamed(ctx context.Context, names []string) ([]Queue, error) {
	rows, err := s.pool.Query(ctx, queuesNamed, names)
	if err != nil {
		return nil, fmt.Errorf("read queues: %w", err)
	}
	qs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Queue])
	if err != nil {
		return nil, fmt.Errorf("read queues: %w", err)
	}
	return s.resolvedAll(qs), nil
}

// QueuesChangedSince returns the queues whose settings changed at or after since
// (database clock), and the database clock now, to pass as since next time (less a
// margin for transactions that were still running).
func (s *Store) QueuesChangedSince(ctx context.Context, since time.Time) ([]Queue, time.Time, error) {
	rows, err := s.pool.Query(ctx, queuesChangedSince, since)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read changed queues: %w", err)
	}
	type changed struct {
		Queue
		ReadAt time.Time `db:"read_at"`
	}
	cs, err := pgx.CollectRows(rows, pgx.RowToStructByName[changed])
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read changed queues: %w", err)
	}
	qs := make([]Queue, len(cs))
	var now time.Time
	for i, c := range cs {
		qs[i], now = s.resolved(c.Queue), c.ReadAt
	}
	if len(cs) == 0 {
		if now, err = s.Now(ctx); err != nil {
			return nil, time.Time{}, fmt.Errorf("read changed queues: %w", err)
		}
	}
	return qs, now, nil
}

// BufferedTask is a task the buffer should hold, with its queue and when it was
// mirrored there.
type BufferedTask struct {
	Buffered
	Queue        string    `db:"queue"`
	DispatchedAt time.Time `db:"dispatched_at"`
}

// BufferedCursor is where a page of ListBuffered ended.
type BufferedCursor struct {
	DispatchedAt time.Time
	ID           uuid.UUID
}

// ListBuffered returns up to limit buffered tasks of every queue, mirrored at least
// minAge ago, in the order they were mirrored, after cursor (nil = from the first).
// A page shorter than limit is the last.
func (s *Store) ListBuffered(ctx context.Context, after *BufferedCursor, minAge time.Duration, limit int) ([]BufferedTask, error) {
	var at *time.Time
	var id *uuid.UUID
	if after != nil {
		at, id = &after.DispatchedAt, &after.ID
	}
	var out []BufferedTask
	err := s.inOrderedScan(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, listBuffered, at, id, ms(minAge), limit, s.now())
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowToStructByName[BufferedTask])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list buffered tasks: %w", err)
	}
	return out, nil
}

// inOrderedScan runs f in a read-only transaction with sorts off (ordered_scan_only),
// as ListBuffered reads its page: in tasks_buffered_idx's order from the cursor on,
// whatever the statistics say.
func (s *Store) inOrderedScan(ctx context.Context, f func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, orderedScanOnly); err != nil {
			return err
		}
		return f(tx)
	})
}

// ExecutingInCappedQueues returns, for every queue with a concurrency cap, the ids of
// its executing tasks (empty for none), in one statement.
func (s *Store) ExecutingInCappedQueues(ctx context.Context) (map[string][]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, executingInCappedQueues)
	if err != nil {
		return nil, fmt.Errorf("executing tasks of capped queues: %w", err)
	}
	out := map[string][]uuid.UUID{}
	var queue string
	var ids []uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&queue, &ids}, func() error {
		out[queue] = append([]uuid.UUID(nil), ids...)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("executing tasks of capped queues: %w", err)
	}
	return out, nil
}
