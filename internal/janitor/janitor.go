package janitor

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Config tunes a Janitor. Zero fields take the defaults.
type Config struct {
	// Retention is how long done and cancelled tasks of a queue that sets no
	// retention of its own are kept after they finish (dead ones are kept forever
	// unless their queue says otherwise), and how long a worker that stopped
	// polling and heartbeating stays listed. Defaults to 7 days. Serve gives the
	// Store the same default (storage.WithRetentionDefaults), which queues show.
	Retention time.Duration
	// Interval is the pause between sweeps (±10% jitter). Defaults to 1 minute.
	Interval time.Duration
	// AuditRetention is how long audit log entries are kept. Defaults to 90 days.
	AuditRetention time.Duration
	// BatchSize is the most rows one statement deletes. Defaults to 500.
	BatchSize int
	// BatchTimeout bounds each batch's transaction on the server (statement_timeout
	// and lock_timeout). Defaults to 5s.
	BatchTimeout time.Duration
	// DaysAhead is how many days after today always have their history
	// partitions, created by every sweep. Defaults to 3 (at least 2).
	DaysAhead int
	// DetachLockTimeout bounds how long taking an expired day out of history waits
	// for the history tables' locks, which every move into history (an ack, a
	// nack, a cancel) takes too: a move waits at most that long behind it. A day
	// that cannot get them is tried again at the next sweep. Defaults to 500ms.
	DetachLockTimeout time.Duration
	// OnSweep, when set, hears of every sweep Run makes, after it (tests use it to
	// wait for a sweep instead of sleeping). It runs on Run's goroutine.
	OnSweep func(Sweep)
}

// Sweep describes one sweep of Run.
type Sweep struct {
	Deleted int   // rows deleted, as SweepOnce counts them
	Err     error // what ended it early, if anything
	// History is what the sweep did to task history.
	History History
}

// History is what one sweep did to task history, and the history it left.
type History struct {
	At                time.Time            // when the sweep started
	Took              time.Duration        // how long the sweep took
	PartitionsCreated int                  // day partitions created ahead (or for rows in a default)
	Dropped           []storage.HistoryDay // days dropped whole, each with the tasks it held
	RowsDropped       int64                // their tasks, in all
	BatchDeleted      int64                // tasks deleted in batches (a shorter retention, or not yet in history)
	Held              int                  // expired days kept back by a running workflow or a busy lock
	Days              []storage.HistoryDay // the day partitions left (estimated rows), for metrics
}

// DefaultRetention is the retention age when Config.Retention is zero.
const DefaultRetention = 7 * 24 * time.Hour

// DefaultAuditRetention is the audit log's retention when Config.AuditRetention is zero.
const DefaultAuditRetention = 90 * 24 * time.Hour

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.AuditRetention = cmp.Or(c.AuditRetention, DefaultAuditRetention)
	c.Interval = cmp.Or(c.Interval, time.Minute)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, 5*time.Second)
	c.DaysAhead = max(cmp.Or(c.DaysAhead, 3), 2)
	c.DetachLockTimeout = cmp.Or(c.DetachLockTimeout, 500*time.Millisecond)
	return c
}

// Batch describes one delete statement the janitor ran.
type Batch struct {
	// Table is "task_history", "tasks", "workflows", "audit_log" or "workers"
	// (swept last), or the partition of a day of history dropped whole.
	Table    string
	Deleted  int           // rows deleted (a task's attempts are not counted)
	Duration time.Duration // the whole transaction, as the janitor measured it
	Dropped  bool          // a day of history left by dropping its partitions
}

// Retention deletes expired tasks and workflows: the retention transitions of
// package lifecycle, which own every change of a task (serve passes its
// lifecycle.Lifecycle). The statements under them have the same methods.
type Retention = lifecycle.RetentionStore

// Janitor deletes expired history. Create it with New; run it with Run.
type Janitor struct {
	tasks Retention
	store *storage.Store
	cfg   Config
	log   *slog.Logger
	// OnBatch, when set, is called after every batch, whether it deleted rows or
	// not (metrics, tests). It runs on the janitor's goroutine.
	OnBatch func(Batch)
	last    atomic.Pointer[Sweep] // Run's last sweep
}

// LastSweep returns Run's last sweep, and false before the first one ends.
func (j *Janitor) LastSweep() (Sweep, bool) {
	if s := j.last.Load(); s != nil {
		return *s, true
	}
	return Sweep{}, false
}

// Report is the sweep as package telemetry records it.
func (s Sweep) Report() telemetry.RetentionSweep {
	h := s.History
	r := telemetry.RetentionSweep{At: h.At, Failed: s.Err != nil, PartitionsDropped: len(h.Dropped),
		RowsDropped: h.RowsDropped, BatchDeleted: h.BatchDeleted}
	if h.Days != nil || s.Err == nil {
		r.Partitions, r.Oldest = map[string]int{}, map[string]time.Time{}
		for _, d := range h.Days {
			r.Partitions[d.Status]++
			if old, ok := r.Oldest[d.Status]; !ok || d.Day.Before(old) {
				r.Oldest[d.Status] = d.Day
			}
		}
	}
	return r
}

// New returns a Janitor that deletes expired tasks and workflows through tasks, and
// the other expired history (tally buckets, audit entries, silent workers) in store.
func New(tasks Retention, store *storage.Store, cfg Config, log *slog.Logger) *Janitor {
	return &Janitor{tasks: tasks, store: store, cfg: cfg.WithDefaults(), log: log}
}

// Run sweeps at once, then every Interval, until ctx is done, and returns nil then.
// A failed sweep is logged and retried at the next interval.
func (j *Janitor) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		start := time.Now()
		n, hist, err := j.sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			j.log.Warn("retention sweep failed", "err", err, "deleted", n)
		case n > 0:
			j.log.Info("retention sweep deleted expired rows", "deleted", n,
				"retention", j.cfg.Retention.String(), "duration", time.Since(start).String())
		}
		timer.Reset(jitter(j.cfg.Interval))
		sw := Sweep{Deleted: n, Err: err, History: hist}
		j.last.Store(&sw)
		if j.cfg.OnSweep != nil {
			j.cfg.OnSweep(sw)
		}
	}
}

// DroppedKeysPerList is how many keys of a dropped day of history one row of
// idempotency_key_drops lists (migration 0034): a batch takes BatchSize /
// DroppedKeysPerList rows, at least one.
const DroppedKeysPerList = 500

// WorkflowBatchDivisor: a retention batch deletes BatchSize/WorkflowBatchDivisor
// workflows (at least one), since each holds up to 1,000 tasks.
const WorkflowBatchDivisor = 50

// SweepOnce first keeps history's day partitions DaysAhead days ahead, drops the days
// of history that every queue's retention has passed whole (their finished
// workflows first, whole), and deletes in batches the history that a queue's shorter
// retention has passed. Then it deletes, batch by batch, every finished plain task
// not in history yet that its queue's
// retention for its status has passed (Retention for done and cancelled, forever for
// dead, where the queue sets none), then every finished workflow all of whose tasks
// have expired so, whole with its tasks, then the audit entries older than AuditRetention, then every
// worker silent for longer than Retention. It returns how many rows it deleted
// (tasks, audit entries and workers; attempts, which go with their tasks, are not
// counted) and the first error, which ends the sweep.
func (j *Janitor) SweepOnce(ctx context.Context) (deleted int, err error) {
	deleted, _, err = j.sweep(ctx)
	return deleted, err
}

// sweep is SweepOnce, reporting what it did to history.
func (j *Janitor) sweep(ctx context.Context) (deleted int, h History, err error) {
	h.At = time.Now()
	defer func() { h.Took = time.Since(h.At) }()
	if err := j.sweepHistory(ctx, &h); err != nil {
		return int(h.RowsDropped + h.BatchDeleted), h, err
	}
	deleted = int(h.RowsDropped + h.BatchDeleted)
	n, err := j.sweepRest(ctx)
	return deleted + n, h, err
}

// sweepHistory keeps the history partitions ahead of time, drops the days that every
// queue's retention lets go (their finished workflows first, whole), then deletes in
// batches what a shorter retention expires earlier.
func (j *Janitor) sweepHistory(ctx context.Context, h *History) error {
	var err error
	if h.PartitionsCreated, err = j.store.EnsureHistoryPartitions(ctx, j.cfg.DaysAhead); err != nil {
		return err
	}
	if err := j.dropDetached(ctx, h); err != nil { // a day a crash left detached
		return err
	}
	days, err := j.store.ExpiredHistoryDays(ctx, j.defaults())
	if err != nil {
		return err
	}
	perBatch := max(1, j.cfg.BatchSize/WorkflowBatchDivisor)
	for _, day := range days {
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			start := time.Now()
			n, err := j.tasks.DeleteHistoryDayWorkflows(ctx, day, perBatch, j.cfg.BatchTimeout)
			if err != nil {
				return err
			}
			h.BatchDeleted += n
			if j.OnBatch != nil {
				j.OnBatch(Batch{Table: "workflows", Deleted: int(n), Duration: time.Since(start)})
			}
			if int(n) < perBatch {
				break
			}
		}
		out, err := j.tasks.DetachHistoryDay(ctx, day, j.cfg.DetachLockTimeout)
		switch {
		case isLockTimeout(err):
			j.log.Info("expired history day kept for the next sweep: its tables were busy",
				"status", day.Status, "day", day.Day.Format(time.DateOnly))
			h.Held++
			continue
		case err != nil:
			return err
		case out == storage.DayHeld:
			j.log.Info("expired history day kept while a running workflow has a task in it",
				"status", day.Status, "day", day.Day.Format(time.DateOnly))
			h.Held++
			continue
		}
		if err := j.dropDetached(ctx, h); err != nil {
			return err
		}
	}
	n, err := j.drain(ctx, "task_history", func() (int64, error) {
		return j.tasks.DeleteExpiredHistory(ctx, j.defaults(), j.cfg.BatchSize, j.cfg.BatchTimeout)
	})
	h.BatchDeleted += int64(n)
	if err != nil {
		return err
	}
	h.Days, err = j.store.ListHistoryDays(ctx)
	return err
}

// dropDetached drops the detached days of history and records them in h.
func (j *Janitor) dropDetached(ctx context.Context, h *History) error {
	start := time.Now()
	days, err := j.tasks.DropDetachedHistory(ctx, j.cfg.BatchTimeout)
	if err != nil {
		return err
	}
	for _, d := range days {
		h.Dropped = append(h.Dropped, d)
		h.RowsDropped += d.Rows
		if j.OnBatch != nil {
			j.OnBatch(Batch{Table: "task_history_" + d.Status + "_p" + d.Day.Format("20060102"), Deleted: int(d.Rows),
				Duration: time.Since(start), Dropped: true})
		}
	}
	return nil
}

// isLockTimeout reports a lock_timeout (SQLSTATE 55P03, lock_not_available).
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// sweepRest deletes what is not in history yet (finished rows a migration has not
// moved), finished workflows, tally buckets, audit entries and silent workers.
func (j *Janitor) sweepRest(ctx context.Context) (deleted int, err error) {
	// Every queue's expired tasks in one statement per batch, oldest first: the
	// sweep's cost follows what expired, not the number of queues.
	deleted, err = j.drain(ctx, "tasks", func() (int64, error) {
		return j.tasks.DeleteExpiredTasks(ctx, j.defaults(), j.cfg.BatchSize, j.cfg.BatchTimeout)
	})
	if err != nil {
		return deleted, err
	}
	// Finished workflows go whole, each with all its tasks, a few per transaction
	// (a workflow may hold 1,000 tasks); a batch that deletes fewer than asked ends.
	perBatch := max(1, j.cfg.BatchSize/WorkflowBatchDivisor)
	for {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		start := time.Now()
		n, err := j.tasks.DeleteExpiredWorkflows(ctx, j.defaults(), perBatch, j.cfg.BatchTimeout)
		if err != nil {
			return deleted, err
		}
		deleted += int(n)
		if j.OnBatch != nil {
			j.OnBatch(Batch{Table: "workflows", Deleted: int(n), Duration: time.Since(start)})
		}
		if int(n) < perBatch {
			break
		}
	}
	if _, err := j.store.DeleteOldTallyBuckets(ctx, storage.TallyBucketKeep); err != nil {
		return deleted, err
	}
	n, err := j.drain(ctx, "audit_log", func() (int64, error) {
		return j.store.DeleteExpiredAudit(ctx, j.cfg.AuditRetention, j.cfg.BatchSize, j.cfg.BatchTimeout)
	})
	deleted += n
	if err != nil {
		return deleted, err
	}
	n, err = j.drain(ctx, "workers", func() (int64, error) {
		return j.store.DeleteSilentWorkers(ctx, j.cfg.Retention, j.cfg.BatchSize, j.cfg.BatchTimeout)
	})
	deleted += n
	if err != nil {
		return deleted, err
	}
	// The keys of dropped days of history whose windows have ended, a list of up to
	// DroppedKeysPerList keys at a time (migration 0034), until no list is due.
	for {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		start := time.Now()
		lists, keys, err := j.store.DeleteDroppedIdempotencyKeys(ctx, max(1, j.cfg.BatchSize/DroppedKeysPerList), j.cfg.BatchTimeout)
		if err != nil {
			return deleted, err
		}
		if lists == 0 {
			break
		}
		deleted += int(keys)
		if j.OnBatch != nil {
			j.OnBatch(Batch{Table: "idempotency_keys", Deleted: int(keys), Duration: time.Since(start)})
		}
	}
	// Idempotency keys reserved past their task's deletion whose window has ended.
	n, err = j.drain(ctx, "idempotency_keys", func() (int64, error) {
		return j.store.DeleteExpiredIdempotencyKeys(ctx, j.cfg.BatchSize)
	})
	return deleted + n, err
}

// drain runs batch until it deletes fewer than BatchSize rows, and returns the total.
func (j *Janitor) drain(ctx context.Context, table string, batch func() (int64, error)) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		start := time.Now()
		n, err := batch()
		if err != nil {
			return total, err
		}
		total += int(n)
		if j.OnBatch != nil {
			j.OnBatch(Batch{Table: table, Deleted: int(n), Duration: time.Since(start)})
		}
		if int(n) < j.cfg.BatchSize {
			return total, nil
		}
	}
}

// defaults is the retention of queues that set none of their own.
func (j *Janitor) defaults() storage.Retention { return storage.DefaultRetention(j.cfg.Retention) }

// jitter spreads replicas' sweeps by up to ±10%.
func jitter(d time.Duration) time.Duration {
	return d - d/10 + rand.N(d/5+1)
}
