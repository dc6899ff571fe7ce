package storage

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Bulk operations: cancelling or discarding many tasks at once, a batch per
// transaction, so that no transaction holds more than one batch of rows however many
// tasks match, and live traffic on the same tables waits on a batch at most.

// BulkBatch is the default number of rows one transaction of a bulk operation
// changes at most.
const BulkBatch = 1000

// BulkCancelled is a task a bulk cancel changed.
type BulkCancelled struct {
	ID         uuid.UUID `db:"id"`
	FromStatus string    `db:"from_status"` // executing: flagged cancel_requested, still running
	Attempts   int       `db:"attempts"`
	CreatedAt  time.Time `db:"created_at"` // the keyset position of the batch (its newest)
	// WorkflowID and Step name the workflow step the task ran; nil for plain tasks.
	WorkflowID *uuid.UUID `db:"workflow_id"`
	Step       *string    `db:"step"`
	// Effects is what the cancel did to the rest of the step's workflow (see
	// Task.Effects); nil for plain tasks.
	Effects *StepEffects `db:"wf_effects"`
}

// CancelWaiting cancels every task of queue whose status is one of statuses, oldest
// first, batch rows per transaction (BulkBatch when batch ≤ 0), calling each after
// every batch commits with the tasks it cancelled. After each batch it reads the
// queue's heads as the dispatcher does (bulkPruneHeads), so that the index entries
// the batch left dead cost the bulk request, not the dispatcher's next scan. It must
// not be given executing: those need their worker told (CancelTasks). Rows another transaction holds are passed over,
// and tried again until none is left, for about a second at most, so a task a
// worker claims meanwhile may start instead of being cancelled. It returns how
// many it cancelled, with ErrQueueNotFound for an unknown queue. When ctx ends, the
// batches committed so far stay.
func (s *Store) CancelWaiting(ctx context.Context, queue string, statuses []string, batch int, each func([]BulkCancelled)) (int, error) {
	if batch <= 0 {
		batch = BulkBatch
	}
	if err := s.mustExist(ctx, queue); err != nil {
		return 0, fmt.Errorf("cancel tasks of %s: %w", queue, err)
	}
	total := 0
	for _, status := range statuses {
		var at *time.Time // keyset position: the newest task of the last batch
		var atID uuid.UUID
		err := s.inBatches(ctx, func() (int, error) {
			var atPos *uuid.UUID
			if at != nil {
				atPos = &atID
			}
			rows, err := s.pool.Query(ctx, bulkCancelWaiting, queue, status, batch, at, atPos)
			if err != nil {
				return 0, err
			}
			done, err := pgx.CollectRows(rows, pgx.RowToStructByName[BulkCancelled])
			if err != nil {
				return 0, err
			}
			for _, t := range done {
				if at == nil || t.CreatedAt.After(*at) || (t.CreatedAt.Equal(*at) && bytesLess(atID, t.ID)) {
					c := t.CreatedAt
					at, atID = &c, t.ID
				}
			}
			if len(done) > 0 {
				var heads int
				if err := s.pool.QueryRow(ctx, bulkPruneHeads, queue).Scan(&heads); err != nil {
					return 0, err
				}
			}
			total += len(done)
			if len(done) > 0 && each != nil {
				each(done)
			}
			return len(done), nil
		}, func() (bool, error) {
			at = nil // start over: what is left was locked when its turn came
			var left bool
			err := s.pool.QueryRow(ctx, anyWithStatus, queue, []string{status}).Scan(&left)
			return left, err
		})
		if err != nil {
			return total, fmt.Errorf("cancel tasks of %s: %w", queue, err)
		}
	}
	return total, nil
}

// bytesLess orders UUIDs as PostgreSQL does.
func bytesLess(a, b uuid.UUID) bool { return bytes.Compare(a[:], b[:]) < 0 }

// CancelTasks cancels the tasks ids of queue in one transaction, as CancelTask does
// each: a waiting task ends cancelled, an executing one gains cancel_requested (its
// FromStatus is executing). Finished tasks and ids of no task of queue are skipped.
// Callers bound len(ids) to a batch.
func (s *Store) CancelTasks(ctx context.Context, queue string, ids []uuid.UUID) ([]BulkCancelled, error) {
	if err := s.mustExist(ctx, queue); err != nil {
		return nil, fmt.Errorf("cancel tasks of %s: %w", queue, err)
	}
	rows, err := s.pool.Query(ctx, bulkCancelIDs, queue, ids)
	if err != nil {
		return nil, fmt.Errorf("cancel tasks of %s: %w", queue, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[BulkCancelled])
	if err != nil {
		return nil, fmt.Errorf("cancel tasks of %s: %w", queue, err)
	}
	return out, nil
}

// DiscardDeadMany deletes dead tasks of queue and their attempts: those among ids,
// or every one when all is set, batch rows per transaction (BulkBatch when batch ≤
// 0), calling each with the ids of every committed batch. Ids that are not dead
// tasks of queue are skipped. It returns how many it deleted, with ErrQueueNotFound
// for an unknown queue. When ctx ends, the batches committed so far stay.
func (s *Store) DiscardDeadMany(ctx context.Context, queue string, ids []uuid.UUID, all bool, batch int, each func([]uuid.UUID)) (int64, error) {
	if batch <= 0 {
		batch = BulkBatch
	}
	if err := s.mustExist(ctx, queue); err != nil {
		return 0, fmt.Errorf("discard dead tasks of %s: %w", queue, err)
	}
	if ids == nil {
		ids = []uuid.UUID{}
	}
	var total int64
	err := s.inBatches(ctx, func() (int, error) {
		rows, err := s.pool.Query(ctx, bulkDiscardDead, queue, ids, all, batch)
		if err != nil {
			return 0, err
		}
		gone, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return 0, err
		}
		total += int64(len(gone))
		if len(gone) > 0 && each != nil {
			each(gone)
		}
		return len(gone), nil
	}, func() (bool, error) {
		var left bool
		err := s.pool.QueryRow(ctx, anyDead, queue, ids, all).Scan(&left)
		return left, err
	})
	if err != nil {
		return total, fmt.Errorf("discard dead tasks of %s: %w", queue, err)
	}
	return total, nil
}

// inBatches runs pass, one batch in its own transaction, until a pass changes
// nothing. After each batch that changed rows it rests (bulkRest), so that the
// operation works at most the Store's bulk duty of the time and live traffic
// shares PostgreSQL's WAL with it instead of queueing behind it. Passes skip rows
// other transactions hold, so when one changes nothing while left still finds
// matching rows, those are locked by short transactions (a dispatch, a claim):
// inBatches tries again after a pause, a few times, and then leaves them.
func (s *Store) inBatches(ctx context.Context, pass func() (int, error), left func() (bool, error)) error {
	for idle := 0; ; {
		began := time.Now()
		n, err := pass()
		if err != nil {
			return err
		}
		if n > 0 {
			idle = 0
			if err := s.bulkRest(ctx, time.Since(began)); err != nil {
				return err
			}
			continue
		}
		more, err := left()
		if err != nil || !more || idle >= bulkLockedRetries {
			return err
		}
		idle++
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(bulkLockedPause):
		}
	}
}

// bulkRest waits after a batch that took worked, so that the batches of a bulk
// operation fill at most bulkDuty of its time: with a duty of 0.5, a 40 ms batch is
// followed by 40 ms of rest. A duty of 1 never rests.
func (s *Store) bulkRest(ctx context.Context, worked time.Duration) error {
	rest := restAfter(worked, s.bulkDuty)
	if rest <= 0 {
		return nil
	}
	t := time.NewTimer(rest)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// restAfter is the rest that follows a batch that took worked, for a duty in (0, 1].
func restAfter(worked time.Duration, duty float64) time.Duration {
	if duty >= 1 || duty <= 0 || worked <= 0 {
		return 0
	}
	return time.Duration(float64(worked) * (1 - duty) / duty)
}

// bulkLockedRetries and bulkLockedPause bound how long a bulk operation waits for
// rows other transactions hold: about a second.
const (
	bulkLockedRetries = 20
	bulkLockedPause   = 50 * time.Millisecond
)

// mustExist returns ErrQueueNotFound unless queue exists.
func (s *Store) mustExist(ctx context.Context, queue string) error {
	ok, err := s.QueueExists(ctx, queue)
	if err == nil && !ok {
		err = ErrQueueNotFound
	}
	return err
}
