package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CreateQueue creates q. It returns ErrQueueExists when the name is taken. Figures
// that a deleted queue of the same name left in the tally are forgotten with it.
func (s *Store) CreateQueue(ctx context.Context, q Queue) (Queue, error) {
	var out Queue
	secret, err := s.sealPushSecret(q.Name, nil, q.PushSecret)
	if err != nil {
		return Queue{}, fmt.Errorf("create queue %s: %w", q.Name, err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, insertQueue, q.Name, q.MaxRetries, q.RateLimit, q.RateBurst,
			q.MaxConcurrency, q.BackoffBaseMs, q.BackoffMaxMs, q.Paused, q.PriorityAgingMs, pushColumn(q, secret), secret, q.RetentionSet.column(), q.IdempotencyWindowMs,
			q.Fairness, q.GroupMaxConcurrency, q.GroupRateLimit, q.GroupRateBurst)
		if out, err = one[Queue](rows, err, ErrQueueExists); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, deleteQueueTally, q.Name)
		return err
	})
	if err != nil {
		return Queue{}, fmt.Errorf("create queue %s: %w", q.Name, err)
	}
	return s.resolved(out), nil
}

// GetQueue returns the queue called name, or ErrQueueNotFound.
func (s *Store) GetQueue(ctx context.Context, name string) (Queue, error) {
	rows, err := s.pool.Query(ctx, getQueue, name)
	q, err := one[Queue](rows, err, ErrQueueNotFound)
	if err != nil {
		return Queue{}, fmt.Errorf("get queue %s: %w", name, err)
	}
	return s.resolved(q), nil
}

// ListQueues returns every queue by name.
func (s *Store) ListQueues(ctx context.Context) ([]Queue, error) {
	rows, err := s.pool.Query(ctx, listQueues)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	qs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Queue])
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return s.resolvedAll(qs), nil
}

// UpdateQueue reads the queue, lets change modify it, and stores every setting
// (all but the name) in one transaction. change may return an error to abort.
func (s *Store) UpdateQueue(ctx context.Context, name string, change func(*Queue) error) (Queue, error) {
	var out Queue
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, getQueue+" FOR UPDATE", name)
		q, err := one[Queue](rows, err, ErrQueueNotFound)
		if err != nil {
			return err
		}
		stored := q.PushSecret
		q = s.resolved(q)
		if err := change(&q); err != nil {
			return err
		}
		secret, err := s.sealPushSecret(name, stored, q.PushSecret)
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, updateQueue, name, q.MaxRetries, q.RateLimit, q.RateBurst,
			q.MaxConcurrency, q.BackoffBaseMs, q.BackoffMaxMs, q.Paused, q.PriorityAgingMs, pushColumn(q, secret), secret, q.RetentionSet.column(), q.IdempotencyWindowMs,
			q.Fairness, q.GroupMaxConcurrency, q.GroupRateLimit, q.GroupRateBurst)
		out, err = one[Queue](rows, err, ErrQueueNotFound)
		return err
	})
	if err != nil {
		return Queue{}, fmt.Errorf("update queue %s: %w", name, err)
	}
	return s.resolved(out), nil
}

// DeleteQueue deletes an empty queue together with its finished (done or cancelled)
// tasks and its tally. It returns ErrQueueNotEmpty while the queue holds unfinished or dead tasks,
// and a *QueueHasSchedulesError (also ErrQueueNotEmpty) while schedules target it.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var locked string
		if err := tx.QueryRow(ctx, lockQueueForDelete, name).Scan(&locked); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrQueueNotFound
			}
			return err
		}
		var live bool
		if err := tx.QueryRow(ctx, holdsLiveTasks, name).Scan(&live); err != nil {
			return err
		}
		if live {
			return ErrQueueNotEmpty
		}
		if err := schedulesTargeting(ctx, tx, name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, deleteQueue, name); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, deleteQueueTally, name) // after the cascade's own deltas
		return err
	})
	if err != nil {
		return fmt.Errorf("delete queue %s: %w", name, err)
	}
	return nil
}

// QueueExists reports whether a queue called name exists.
func (s *Store) QueueExists(ctx context.Context, name string) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, queueExists, name).Scan(&ok); err != nil {
		return false, fmt.Errorf("check queue %s: %w", name, err)
	}
	return ok, nil
}

// queueOrTaskNotFound returns ErrQueueNotFound when the queue is missing, else ErrTaskNotFound.
func (s *Store) queueOrTaskNotFound(ctx context.Context, queue string) error {
	ok, err := s.QueueExists(ctx, queue)
	if err != nil {
		return err
	}
	if !ok {
		return ErrQueueNotFound
	}
	return ErrTaskNotFound
}
