package storage

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Counts without counting. Migration 0008's triggers append every change of a task's
// status, and every attempt's outcome, to a delta table in the changing statement's
// own transaction; FoldTally moves the deltas into per-queue totals, and the readers
// here add the deltas not folded yet. So:
//
//   - depth by status and dlq_depth are exact: they change in the same transaction
//     as the rows they count, whatever changed them, and a rolled-back transaction
//     (a crash) leaves no delta;
//   - throughput and error rate are exact counts of the attempts that finished in
//     the window, but the window moves in 10-second steps (50 to 60 s long);
//   - the oldest pending age is read from the head of an index, not kept.
//
// None of them reads a queue's rows: a read costs the few total and delta rows of a
// queue, so 10 million tasks cost what 10 do.

// TallyBucketKeep is how long attempt-outcome buckets are kept (the throughput window
// needs one minute of them).
const TallyBucketKeep = 10 * time.Minute

// attemptMetric prefixes attempt outcomes among the tally's metrics.
const attemptMetric = "attempt:"

// FoldTally moves up to limit of the oldest count deltas into the totals and returns
// how many it moved. Any number of replicas may fold at once.
func (s *Store) FoldTally(ctx context.Context, limit int) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, foldTally, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("fold tally: %w", err)
	}
	return n, nil
}

// DeleteOldTallyBuckets deletes attempt-outcome buckets older than olderThan and
// returns how many it deleted.
func (s *Store) DeleteOldTallyBuckets(ctx context.Context, olderThan time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, deleteOldBuckets, ms(olderThan))
	if err != nil {
		return 0, fmt.Errorf("delete old tally buckets: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Stats summarises queue: depth by status, throughput and error rate over the last
// minute, the oldest waiting task's age and the dead-letter depth.
func (s *Store) Stats(ctx context.Context, queue string) (Stats, error) {
	var st Stats
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, queueExists, queue).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return ErrQueueNotFound
		}
		all, err := readStats(ctx, tx, []string{queue})
		st = all[queue]
		return err
	})
	if err != nil {
		return Stats{}, fmt.Errorf("stats of %s: %w", queue, err)
	}
	return st, nil
}

// AllStats returns the Stats of every queue, in one snapshot whose cost grows with
// the number of queues, never with the number of tasks.
func (s *Store) AllStats(ctx context.Context) (map[string]Stats, error) {
	var out map[string]Stats
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, queueNames)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		out, err = readStats(ctx, tx, nil)
		if err != nil {
			return err
		}
		live := make(map[string]Stats, len(names))
		for _, name := range names { // the tally may still hold a deleted queue's zeros
			st, ok := out[name]
			if !ok {
				st = newStats(name)
			}
			live[name] = st
		}
		out = live
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stats of every queue: %w", err)
	}
	return out, nil
}

// QueueStates returns every queue's task counts by status and oldest waiting age,
// for the metrics collector.
func (s *Store) QueueStates(ctx context.Context) (map[string]QueueState, error) {
	all, err := s.AllStats(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]QueueState, len(all))
	for q, st := range all {
		out[q] = QueueState{Depth: st.Depth, OldestPendingAge: st.OldestPendingAgeSecond}
	}
	return out, nil
}

func newStats(queue string) Stats {
	st := Stats{Queue: queue, Depth: make(map[string]int64, len(Statuses))}
	for _, status := range Statuses {
		st.Depth[status] = 0
	}
	return st
}

// readStats reads the tally of queues (nil = every queue) and the oldest waiting age
// of those with a backlog.
func readStats(ctx context.Context, tx pgx.Tx, queues []string) (map[string]Stats, error) {
	out := make(map[string]Stats, len(queues))
	for _, q := range queues {
		out[q] = newStats(q)
	}
	type outcomes struct{ succeeded, failed, finished int64 }
	rates := map[string]*outcomes{}
	var window float64
	rows, err := tx.Query(ctx, queueTally, queues)
	if err != nil {
		return nil, err
	}
	var queue, metric string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&queue, &metric, &n, &window}, func() error {
		st, ok := out[queue]
		if !ok {
			st = newStats(queue)
			out[queue] = st
		}
		outcome, isAttempt := strings.CutPrefix(metric, attemptMetric)
		if !isAttempt {
			st.Depth[metric] = n
			return nil
		}
		r := rates[queue]
		if r == nil {
			r = &outcomes{}
			rates[queue] = r
		}
		switch outcome {
		case AttemptSucceeded:
			r.succeeded += n
		case AttemptFailed, AttemptAbandoned, AttemptTimedOut:
			r.failed += n
		}
		if outcome != AttemptCancelled && outcome != AttemptReleased {
			r.finished += n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var backlog []string
	for q, st := range out {
		st.DLQDepth = st.Depth[StatusDead]
		if r := rates[q]; r != nil && window > 0 {
			st.ThroughputPerSec = float64(r.succeeded) / window
			if r.finished > 0 {
				st.ErrorRate = float64(r.failed) / float64(r.finished)
			}
		}
		out[q] = st
		if st.Depth[StatusPending]+st.Depth[StatusRetry]+st.Depth[StatusBuffered] > 0 {
			backlog = append(backlog, q)
		}
	}
	if len(backlog) == 0 {
		return out, nil
	}
	rows, err = tx.Query(ctx, oldestWaiting, backlog)
	if err != nil {
		return nil, err
	}
	var age *float64
	_, err = pgx.ForEachRow(rows, []any{&queue, &age}, func() error {
		if age != nil && *age > 0 {
			st := out[queue]
			st.OldestPendingAgeSecond = *age
			out[queue] = st
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TallyDrift counts queue's tasks the slow way (count(*), a full scan of the
// queue's rows, finished ones in history included: for tests and for operators'
// `taskforge queue check-counts`, never a request path) and returns, per status,
// how far the kept count is off (kept minus counted); empty when it is exact.
func (s *Store) TallyDrift(ctx context.Context, queue string) (map[string]int64, error) {
	drift := map[string]int64{}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		kept, err := readStats(ctx, tx, []string{queue})
		if err != nil {
			return err
		}
		real := map[string]int64{}
		rows, err := tx.Query(ctx, recountQueue, queue)
		if err != nil {
			return err
		}
		var status string
		var n int64
		if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error { real[status] = n; return nil }); err != nil {
			return err
		}
		for status, k := range kept[queue].Depth {
			if d := k - real[status]; d != 0 {
				drift[status] = d
			}
		}
		for status, r := range real {
			if _, ok := kept[queue].Depth[status]; !ok && r != 0 {
				drift[status] = -r
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tally drift of %s: %w", queue, err)
	}
	return drift, nil
}
