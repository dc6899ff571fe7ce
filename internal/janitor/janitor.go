package janitor

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/taskforge/taskforge/storage"
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
	// OnSweep, when set, hears of every sweep Run makes, after it (tests use it to
	// wait for a sweep instead of sleeping). It runs on Run's goroutine.
	OnSweep func(Sweep)
}

// Sweep describes one sweep of Run.
type Sweep struct {
	Deleted int   // rows deleted, as SweepOnce counts them
	Err     error // what ended it early, if anything
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
	return c
}

// Batch describes one delete statement the janitor ran.
type Batch struct {
	Table    string        // "tasks", "workflows", "audit_log" or "workers" (swept last)
	Deleted  int           // rows deleted (a task's attempts are not counted)
	Duration time.Duration // the whole transaction, as the janitor measured it
}

// Retention deletes expired tasks and workflows: the retention transitions of
// package lifecycle, which own every change of a task (serve passes its
// lifecycle.Lifecycle).
type Retention interface {
	DeleteExpiredTasks(ctx context.Context, defaults storage.Retention, limit int, timeout time.Duration) (int64, error)
	DeleteExpiredWorkflows(ctx context.Context, defaults storage.Retention, limit int, timeout time.Duration) (int64, error)
}

// Janitor deletes expired history. Create it with New; run it with Run.
type Janitor struct {
	tasks Retention
	store *storage.Store
	cfg   Config
	log   *slog.Logger
	// OnBatch, when set, is called after every batch, whether it deleted rows or
	// not (metrics, tests). It runs on the janitor's goroutine.
	OnBatch func(Batch)
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
		n, err := j.SweepOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			j.log.Warn("retention sweep failed", "err", err, "deleted", n)
		case n > 0:
			j.log.Info("retention sweep deleted expired rows", "deleted", n,
				"retention", j.cfg.Retention.String(), "duration", time.Since(start).String())
		}
		timer.Reset(jitter(j.cfg.Interval))
		if j.cfg.OnSweep != nil {
			j.cfg.OnSweep(Sweep{Deleted: n, Err: err})
		}
	}
}

// WorkflowBatchDivisor: a retention batch deletes BatchSize/WorkflowBatchDivisor
// workflows (at least one), since each holds up to 1,000 tasks.
const WorkflowBatchDivisor = 50

// SweepOnce deletes, batch by batch, every finished plain task that its queue's
// retention for its status has passed (Retention for done and cancelled, forever for
// dead, where the queue sets none), then every finished workflow all of whose tasks
// have expired so, whole with its tasks, then the audit entries older than AuditRetention, then every
// worker silent for longer than Retention. It returns how many rows it deleted
// (tasks, audit entries and workers; attempts, which go with their tasks, are not
// counted) and the first error, which ends the sweep.
func (j *Janitor) SweepOnce(ctx context.Context) (deleted int, err error) {
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
