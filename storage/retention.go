package storage

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention is how long a queue keeps its finished tasks after they finish, per
// final status, in milliseconds; nil keeps them forever. Its JSON form is the API's
// queue field "retention".
type Retention struct {
	DoneMs      *int64 `json:"done_ms"`
	CancelledMs *int64 `json:"cancelled_ms"`
	DeadMs      *int64 `json:"dead_ms"`
}

// Retention limits: a queue's retention of a status is from MinRetention to
// MaxRetention, or forever.
const (
	MinRetention = time.Minute
	MaxRetention = 100 * 365 * 24 * time.Hour
)

// DefaultDoneRetention is serve's default retention of done and cancelled tasks
// (its --retention flag); dead tasks are kept forever unless a queue says otherwise.
const DefaultDoneRetention = 7 * 24 * time.Hour

// DefaultRetention returns the retention of a queue that sets none: done and
// cancelled tasks are kept doneCancelled (forever when it is not positive), dead
// tasks forever.
func DefaultRetention(doneCancelled time.Duration) Retention {
	var r Retention
	if doneCancelled > 0 {
		v := ms(doneCancelled)
		r.DoneMs, r.CancelledMs = &v, &v
	}
	return r
}

// RetentionKeys are the keys of a queue's retention, one per final status, in the
// order the API lists them.
var RetentionKeys = []string{"done_ms", "cancelled_ms", "dead_ms"}

// RetentionSettings is the retention a queue sets itself, as stored in
// queues.retention: a key of RetentionKeys left out takes the server's default, a
// nil value keeps that status forever.
type RetentionSettings map[string]*int64

// Resolve returns the effective retention: s, with def where s says nothing.
func (s RetentionSettings) Resolve(def Retention) Retention {
	pick := func(key string, d *int64) *int64 {
		v, ok := s[key]
		if !ok {
			v = d
		}
		if v == nil {
			return nil
		}
		c := *v
		return &c
	}
	return Retention{DoneMs: pick("done_ms", def.DoneMs),
		CancelledMs: pick("cancelled_ms", def.CancelledMs), DeadMs: pick("dead_ms", def.DeadMs)}
}

// column is s as stored: never NULL (an empty object keeps every default).
func (s RetentionSettings) column() RetentionSettings {
	if s == nil {
		return RetentionSettings{}
	}
	return s
}

// WithRetentionDefaults sets the retention of queues that set none themselves
// (serve's --retention). Without it, done and cancelled tasks are kept
// DefaultDoneRetention and dead ones forever.
func WithRetentionDefaults(r Retention) Option { return func(s *Store) { s.retention = r } }

// resolved returns q with its effective retention filled in.
func (s *Store) resolved(q Queue) Queue {
	q.Retention = q.RetentionSet.Resolve(s.retention)
	return q
}

// resolvedAll fills in every queue's effective retention, in place.
func (s *Store) resolvedAll(qs []Queue) []Queue {
	for i := range qs {
		qs[i] = s.resolved(qs[i])
	}
	return qs
}

// Retention: deleting finished history in small batches (used by package janitor).
// Each batch is its own short transaction whose statement and lock waits are
// bounded by a server-side timeout, and SKIP LOCKED passes over rows another
// transaction holds, so a batch never waits on live traffic and live traffic waits
// on a batch for at most that batch's duration.

// DeleteExpiredTasks deletes up to limit finished tasks outside workflows, of any
// queue, that their queue's retention for their status has passed on the database
// clock (defaults where the queue sets none; nil keeps forever), together with their
// attempts, and returns how many tasks it deleted. The transaction is bounded by
// timeout.
func (s *Store) DeleteExpiredTasks(ctx context.Context, defaults Retention, limit int, timeout time.Duration) (int64, error) {
	n, err := s.shortDelete(ctx, timeout, deleteExpiredTasks, defaults.DoneMs, defaults.CancelledMs, defaults.DeadMs, limit)
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
