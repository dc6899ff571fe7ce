package backfill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskforge/taskforge/storage"
)

// Store is what the mover needs of storage.Store.
type Store interface {
	FinishedInTasks(ctx context.Context) (int64, time.Time, error)
	EnsureHistoryPartitionsSince(ctx context.Context, since time.Time, lockTimeout time.Duration) (int, error)
	MoveFinishedBatch(ctx context.Context, from, blocks int64, timeout time.Duration) (storage.MoveBatch, error)
	DropFinishedIndexes(ctx context.Context) ([]string, error)
}

// Config tunes a Mover. Zero fields take the defaults.
type Config struct {
	// BatchBlocks is how many blocks of tasks' heap (8 kB each) one batch reads;
	// the finished tasks in them move in its transaction. Defaults to 120, about
	// 5,000 tasks with small payloads.
	BatchBlocks int
	// BatchTimeout bounds each batch's transaction on the server (statement_timeout
	// and lock_timeout). Defaults to 10s.
	BatchTimeout time.Duration
	// LockTimeout bounds the wait for history's locks when the mover creates the
	// day partitions of the days it is about to fill. Defaults to 1s.
	LockTimeout time.Duration
	// Pause is a rest between batches, which leaves the database to the live queue
	// for that long. Defaults to none (migrate); serve rests as long as each batch
	// took (half the time).
	Pause time.Duration
	// PauseAsBatch makes the rest after each batch as long as the batch took (when
	// longer than Pause).
	PauseAsBatch bool
	// Interval is how long Run waits after each run of MoveAll before the next:
	// during a rolling upgrade, replicas of the older release still leave finished
	// tasks in tasks, and a run may have failed or met rows held by other
	// transactions. Defaults to 5 minutes.
	Interval time.Duration
	// OnBatch, when set, hears of every batch with the progress so far (a progress
	// line, metrics, tests). It runs on the mover's goroutine.
	OnBatch func(Progress)
	// OnRun, when set, hears how every run of MoveAll that Run makes ended (metrics;
	// tests wait on it). It runs on the mover's goroutine.
	OnRun func(Run)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.BatchBlocks = cmp.Or(c.BatchBlocks, 120)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, 10*time.Second)
	c.LockTimeout = cmp.Or(c.LockTimeout, time.Second)
	c.Interval = cmp.Or(c.Interval, 5*time.Minute)
	return c
}

// Progress is how far a run of the mover has come.
type Progress struct {
	// Total is how many finished tasks were in tasks when the run started.
	Total int64
	// Moved is how many it has moved into history since, with Attempts attempts.
	Moved, Attempts int64
	// Left is how many finished tasks are still in tasks: Total - Moved during a
	// pass (rows another mover takes are not seen), counted again after it.
	Left int64
	// Batches is how many batches ran; Last is the last one.
	Batches int
	Last    storage.MoveBatch
	// Elapsed is the time since the run started.
	Elapsed time.Duration
	// IndexesDropped names the indexes of tasks that only finished rows needed
	// (migration 0027) which the run dropped once it left none.
	IndexesDropped []string
}

// Rate is the rows moved per second so far.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Moved) / p.Elapsed.Seconds()
}

// ETA is the time the rows left would take at Rate (zero when unknown or done).
func (p Progress) ETA() time.Duration {
	r := p.Rate()
	if r <= 0 || p.Left <= 0 {
		return 0
	}
	return time.Duration(float64(p.Left) / r * float64(time.Second)).Round(time.Second)
}

// String is the progress line: moved / total, share, rate and ETA.
func (p Progress) String() string {
	pct := 100.0
	if p.Total > 0 {
		pct = 100 * float64(p.Moved) / float64(p.Total)
	}
	return fmt.Sprintf("history: %d / %d finished tasks moved (%.1f%%), %.0f/s, %d left, ETA %s",
		p.Moved, p.Total, pct, p.Rate(), p.Left, p.ETA())
}

// Mover moves finished tasks out of tasks into history. Create it with New.
type Mover struct {
	store Store
	cfg   Config
	log   *slog.Logger
}

// New returns a Mover working on store.
func New(store Store, cfg Config, log *slog.Logger) *Mover {
	return &Mover{store: store, cfg: cfg.WithDefaults(), log: log}
}

// ErrRowsHeld says that a run ended with finished tasks left in tasks that other
// transactions held through a whole pass; a later run takes them.
var ErrRowsHeld = errors.New("finished tasks left in tasks, held by other transactions")

// MoveAll moves every finished task in tasks into history, pass after pass, and
// returns the progress at the end: Left is zero then, unless the error says why
// not (ErrRowsHeld when a pass moved nothing of what was left). Once none is left,
// it drops the indexes of tasks that only finished rows needed, if they are still
// there (storage.Store.DropFinishedIndexes): the hot queue stops paying for them.
func (m *Mover) MoveAll(ctx context.Context) (Progress, error) {
	start := time.Now()
	var p Progress
	left, oldest, err := m.store.FinishedInTasks(ctx)
	if err != nil {
		return p, err
	}
	p.Total, p.Left = left, left
	for p.Left > 0 {
		if _, err := m.store.EnsureHistoryPartitionsSince(ctx, oldest, m.cfg.LockTimeout); err != nil {
			if ctx.Err() != nil {
				return p, err
			}
			// The moves of the live queue hold history's locks too (migration 0023):
			// under load the partitions may not be made within LockTimeout. The rows
			// of days without one go into history's default partitions, from which
			// the janitor's sweep moves them into their days once it makes them.
			m.log.Warn("history's day partitions not created; the finished tasks of those days go into its default partitions",
				"since", oldest.Format(time.DateOnly), "err", err)
		}
		before := p.Moved
		if err := m.pass(ctx, start, &p); err != nil {
			return p, err
		}
		if p.Left, oldest, err = m.store.FinishedInTasks(ctx); err != nil {
			return p, err
		}
		p.Elapsed = time.Since(start)
		if p.Left > 0 && p.Moved == before {
			return p, fmt.Errorf("%w: %d", ErrRowsHeld, p.Left)
		}
	}
	// A replica of an older release may finish a task into tasks right after the
	// count: the indexes only spare reads of such rows a scan, and the next run
	// moves them.
	p.IndexesDropped, err = m.store.DropFinishedIndexes(ctx)
	p.Elapsed = time.Since(start)
	return p, err
}

// pass reads tasks' heap once, batch after batch, from the first block to the last.
func (m *Mover) pass(ctx context.Context, start time.Time, p *Progress) error {
	for from := int64(0); ; {
		t0 := time.Now()
		b, err := m.store.MoveFinishedBatch(ctx, from, int64(m.cfg.BatchBlocks), m.cfg.BatchTimeout)
		if err != nil {
			return err
		}
		took := time.Since(t0)
		p.Batches++
		p.Last = b
		p.Moved += b.Moved
		p.Attempts += b.Attempts
		p.Left = max(p.Left-b.Moved, 0)
		p.Elapsed = time.Since(start)
		if m.cfg.OnBatch != nil {
			m.cfg.OnBatch(*p)
		}
		from += int64(m.cfg.BatchBlocks)
		if from >= b.Blocks {
			return nil
		}
		pause := m.cfg.Pause
		if m.cfg.PauseAsBatch {
			pause = max(pause, took)
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pause):
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Run is how one run of MoveAll ended.
type Run struct {
	Progress Progress
	Err      error
}

// Run moves every finished task in tasks into history, and again every Interval,
// until ctx is done; it returns nil then. A failed run, or one that left rows held
// by other transactions, is logged; the next run takes what it left. Once every
// replica runs a release with history, each run finds nothing: one count of tasks.
func (m *Mover) Run(ctx context.Context) error {
	for {
		p, err := m.MoveAll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if m.cfg.OnRun != nil {
			m.cfg.OnRun(Run{Progress: p, Err: err})
		}
		switch {
		case err != nil:
			m.log.Warn("moving finished tasks into history paused until the next run", "err", err,
				"moved", p.Moved, "left", p.Left, "next", m.cfg.Interval.String())
		case p.Moved > 0:
			m.log.Info("finished tasks left in tasks by an older release moved into history", "moved", p.Moved,
				"attempts", p.Attempts, "took", p.Elapsed.Round(time.Millisecond).String())
		}
		if len(p.IndexesDropped) > 0 {
			m.log.Info("no finished task left in tasks: its indexes of finished tasks dropped", "indexes", p.IndexesDropped)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(m.cfg.Interval):
		}
	}
}
