package storage

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// skippedKeys are the idempotency keys of the tasks the enqueue skipped (out[i] zero).
func skippedKeys(tasks []NewTask, out []Enqueued) []string {
	var keys []string
	for i, t := range tasks {
		if out[i].Task.ID == uuid.Nil && t.IdempotencyKey != nil {
			keys = append(keys, *t.IdempotencyKey)
		}
	}
	return keys
}

// retakeExpiredKeys frees the keys among keys whose reservation outlived its task and
// has ended (free_expired_idempotency_keys), and inserts again, within tx, the tasks
// of tasks that were skipped for them, filling their places in out. Keys still held
// are left for matchExisting.
func (s *Store) retakeExpiredKeys(ctx context.Context, tx pgx.Tx, queue string, tasks []NewTask, keys []string,
	out []Enqueued, opts EnqueueOptions, schedule *string) ([]Enqueued, error) {
	rows, err := tx.Query(ctx, freeExpiredKeys, queue, keys)
	if err != nil {
		return nil, err
	}
	freed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(freed) == 0 {
		return out, err
	}
	isFreed := make(map[string]bool, len(freed))
	for _, k := range freed {
		isFreed[k] = true
	}
	var again []NewTask
	var at []int
	for i, t := range tasks {
		if out[i].Task.ID == uuid.Nil && t.IdempotencyKey != nil && isFreed[*t.IdempotencyKey] {
			again = append(again, t)
			at = append(at, i)
		}
	}
	inserted, err := s.insertTasks(ctx, tx, queue, again, opts, schedule)
	if err != nil {
		return nil, err
	}
	for j, e := range inserted {
		out[at[j]] = e
	}
	return out, nil
}

// reservations returns, of keys, those of queue reserved past their task's deletion
// and still within their window, with the task each names.
func reservations(ctx context.Context, tx pgx.Tx, queue string, keys []string) (map[string]uuid.UUID, error) {
	rows, err := tx.Query(ctx, idempotencyReservations, queue, keys)
	if err != nil {
		return nil, err
	}
	out := map[string]uuid.UUID{}
	var key string
	var id uuid.UUID
	var until time.Time
	_, err = pgx.ForEachRow(rows, []any{&key, &id, &until}, func() error { out[key] = id; return nil })
	return out, err
}

// DeleteExpiredIdempotencyKeys deletes up to limit key reservations whose window has
// ended (as of the Store's clock), and returns how many it deleted.
func (s *Store) DeleteExpiredIdempotencyKeys(ctx context.Context, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, deleteExpiredKeys, s.now(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}

// DeleteDroppedIdempotencyKeys takes up to limit lists of the keys of dropped days
// of history (migration 0034) whose windows have all ended (as of the Store's clock),
// in one transaction bounded by timeout, deletes their keys still held by their
// dropped task, and returns how many lists it took and how many keys it deleted. A
// caller repeats it until it takes none.
func (s *Store) DeleteDroppedIdempotencyKeys(ctx context.Context, limit int, timeout time.Duration) (lists, keys int64, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setRetentionTimeouts, strconv.FormatInt(max(ms(timeout), 1), 10)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, deleteDroppedKeys, s.now(), limit).Scan(&lists, &keys)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("delete idempotency keys of dropped history: %w", err)
	}
	return lists, keys, nil
}

// DuplicateRequestError says which task of a batch reused an idempotency key whose
// task is gone but whose queue's idempotency window still holds it.
type DuplicateRequestError struct {
	Index  int       // position in the batch
	Key    string    // the idempotency key
	TaskID uuid.UUID // the task that held it
}

func (e *DuplicateRequestError) Error() string {
	return fmt.Sprintf("task %d: idempotency key %q was used by task %s, which is gone; the queue's idempotency window still holds the key",
		e.Index, e.Key, e.TaskID)
}

// Is makes errors.Is(err, ErrDuplicateRequest) true.
func (e *DuplicateRequestError) Is(target error) bool { return target == ErrDuplicateRequest }
