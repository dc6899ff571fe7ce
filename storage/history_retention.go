package storage

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// History retention (migration 0021, used by package janitor): a day of history that
// every queue's retention lets go leaves by detaching and dropping its partitions;
// what a shorter retention expires earlier is deleted in batches. See
// expired_history_days and delete_expired_history.

var (
	ensureHistoryPartitions = mustLoad("ensure_history_partitions")
	expiredHistoryDays      = mustLoad("expired_history_days")
	deleteExpiredHistory    = mustLoad("delete_expired_history")
	historyDayWorkflows     = mustLoad("history_day_workflows")
	detachHistoryDay        = mustLoad("detach_history_day")
	dropDetachedHistory     = mustLoad("drop_detached_history")
	listHistoryPartitions   = mustLoad("list_history_partitions")
)

// HistoryDay is one UTC day of one final status in task history: a partition of
// task_history with its twin of attempt_history.
type HistoryDay struct {
	Status string    `json:"status" db:"status"`
	Day    time.Time `json:"day" db:"day"` // midnight UTC
	// Rows is the planner's estimate of the day's tasks (ListHistoryDays) or the
	// tasks it held when it was dropped (DropDetachedHistory).
	Rows int64 `json:"rows" db:"rows"`
}

// End is when the day ends: the partition holds tasks finished in [Day, End).
func (d HistoryDay) End() time.Time { return d.Day.AddDate(0, 0, 1) }

// EnsureHistoryPartitions creates the day partitions of history for today (on the
// Store's clock) and the days ahead, and for the days of which a default partition
// holds rows, which move into them. It returns how many partitions it created.
func (s *Store) EnsureHistoryPartitions(ctx context.Context, daysAhead int) (int, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, ensureHistoryPartitions, s.now(), daysAhead+1).Scan(&n); err != nil {
		return 0, fmt.Errorf("ensure history partitions: %w", err)
	}
	return int(n), nil
}

// ListHistoryDays returns every day partition of task history, by status and day,
// with the planner's estimate of its rows (read from the catalog, never counted).
func (s *Store) ListHistoryDays(ctx context.Context) ([]HistoryDay, error) {
	return s.historyDays(ctx, "list history partitions", listHistoryPartitions)
}

// ExpiredHistoryDays returns the days of history whose whole day every queue's
// retention for its status has passed (defaults where a queue sets none), oldest
// first.
func (s *Store) ExpiredHistoryDays(ctx context.Context, defaults Retention) ([]HistoryDay, error) {
	return s.historyDays(ctx, "list expired history days", expiredHistoryDays,
		defaults.DoneMs, defaults.CancelledMs, defaults.DeadMs, s.now())
}

func (s *Store) historyDays(ctx context.Context, what, sql string, args ...any) ([]HistoryDay, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	days, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (HistoryDay, error) {
		var d HistoryDay
		var n *int64
		if len(r.FieldDescriptions()) == 3 {
			err := r.Scan(&d.Status, &d.Day, &n)
			if n != nil {
				d.Rows = *n
			}
			return d, err
		}
		err := r.Scan(&d.Status, &d.Day)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	for i := range days {
		days[i].Day = days[i].Day.UTC()
	}
	return days, nil
}

// DeleteHistoryDayWorkflows deletes up to limit finished workflows with a task in
// day, whole with all their tasks, in one transaction bounded by timeout, and
// returns how many it deleted: a workflow leaves whole before its day does.
func (s *Store) DeleteHistoryDayWorkflows(ctx context.Context, day HistoryDay, limit int, timeout time.Duration) (int64, error) {
	n, err := s.deleteWorkflowsWhole(ctx, timeout, historyDayWorkflows, day.Status, day.Day, day.End(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete workflows of %s history of %s: %w", day.Status, day.Day.Format(time.DateOnly), err)
	}
	return n, nil
}

// Outcomes of DetachHistoryDay.
const (
	DayDetached = "detached" // out of its parents, to be dropped by DropDetachedHistory
	DayHeld     = "held"     // a workflow's task is still in it
	DayGone     = "gone"     // no such partition (another replica took it)
)

// DetachHistoryDay takes day's partitions (task and attempt) out of history, unless
// a workflow's task is still in it, and says which (DayDetached, DayHeld, DayGone).
// lockTimeout bounds the wait for the history tables' locks, which every move into
// history also takes: a detach waits on live traffic at most that long, and live
// traffic on the detach as long as the catalog change.
func (s *Store) DetachHistoryDay(ctx context.Context, day HistoryDay, lockTimeout time.Duration) (string, error) {
	var out string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setRetentionTimeouts, strconv.FormatInt(max(ms(lockTimeout), 1), 10)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, detachHistoryDay, day.Status, day.Day).Scan(&out)
	})
	if err != nil {
		return "", fmt.Errorf("detach %s history of %s: %w", day.Status, day.Day.Format(time.DateOnly), err)
	}
	return out, nil
}

// DropDetachedHistory drops every detached day of history, each with its attempts,
// after counting its tasks out of the tally and listing their idempotency keys for
// DeleteDroppedIdempotencyKeys (the keys' rows are not touched: each stays reserved
// until its window ends), in one transaction bounded by timeout, and returns the days
// with the tasks each held. Nothing the live queue uses is locked.
func (s *Store) DropDetachedHistory(ctx context.Context, timeout time.Duration) ([]HistoryDay, error) {
	var days []HistoryDay
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setRetentionTimeouts, strconv.FormatInt(max(ms(timeout), 1), 10)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, dropDetachedHistory)
		if err != nil {
			return err
		}
		days, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (HistoryDay, error) {
			var d HistoryDay
			err := r.Scan(&d.Status, &d.Day, &d.Rows)
			d.Day = d.Day.UTC()
			return d, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("drop detached history: %w", err)
	}
	return days, nil
}

// DeleteExpiredHistory deletes up to limit finished plain tasks of history that their
// queue's retention for their status has passed while another queue keeps that
// status longer (what every queue lets go leaves by the day instead), with their
// attempts and their idempotency keys' reservations, in one transaction bounded by
// timeout, and returns how many tasks it deleted.
func (s *Store) DeleteExpiredHistory(ctx context.Context, defaults Retention, limit int, timeout time.Duration) (int64, error) {
	n, err := s.shortDelete(ctx, timeout, deleteExpiredHistory, defaults.DoneMs, defaults.CancelledMs, defaults.DeadMs, limit, s.now())
	if err != nil {
		return 0, fmt.Errorf("delete expired history: %w", err)
	}
	return n, nil
}
