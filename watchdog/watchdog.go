// Package watchdog reclaims work from workers that crashed, hung or were cut off.
//
// It ends every attempt whose lease expired (abandoned) or whose timeout passed
// (timed_out; leases never outlive an attempt's deadline) and sends the task to retry
// with backoff, or to dead when its budget is spent, or to cancelled when a cancel
// was requested. It sleeps until the earliest lease expiry, bounded by its interval.
// Reclaims use FOR UPDATE SKIP LOCKED, so any number of replicas can run it.
//
// The watchdog decides when to sweep; the transition itself, with its follow-ups
// (the slots the lost attempts held, the dispatcher, the tasks' waiters, telemetry),
// is its Reclaimer's (package lifecycle). The watchdog never touches a task whose
// lease is still valid, and never Redis.
package watchdog

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/taskforge/taskforge/storage"
)

// Config tunes a Watchdog. Zero fields take the defaults.
type Config struct {
	// Interval is the longest the watchdog sleeps between sweeps. Defaults to 15s.
	Interval time.Duration
	// BatchSize is the most attempts one sweep statement ends. Defaults to 500.
	BatchSize int
	// OnSweep, when set, hears of every sweep Run makes, after it (tests use it to
	// wait for a sweep instead of sleeping). It runs on Run's goroutine.
	OnSweep func(Sweep)
}

// Sweep describes one sweep of Run.
type Sweep struct {
	Reclaimed int   // attempts it ended
	Err       error // what ended it early, if anything
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Interval = cmp.Or(c.Interval, 15*time.Second)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	return c
}

// Reclaimer ends expired attempts; *lifecycle.Lifecycle is one.
type Reclaimer interface {
	// Reclaim ends up to limit attempts whose lease expired or whose timeout passed,
	// with every follow-up, and returns what it ended.
	Reclaim(ctx context.Context, limit int) ([]storage.Reclaimed, error)
}

// Watchdog reclaims expired leases. Create it with New; run it with Run.
type Watchdog struct {
	store     *storage.Store
	reclaimer Reclaimer
	cfg       Config
	log       *slog.Logger
}

// New returns a Watchdog that reads lease expiries from store and reclaims through
// reclaimer.
func New(store *storage.Store, reclaimer Reclaimer, cfg Config, log *slog.Logger) *Watchdog {
	return &Watchdog{store: store, reclaimer: reclaimer, cfg: cfg.WithDefaults(), log: log}
}

// Run sweeps until ctx is done and returns nil then.
func (w *Watchdog) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		wait, sw := w.sweep(ctx)
		timer.Reset(wait)
		if w.cfg.OnSweep != nil {
			w.cfg.OnSweep(sw)
		}
	}
}

// sweep reclaims what has expired and returns how long to sleep and what it did.
func (w *Watchdog) sweep(ctx context.Context) (time.Duration, Sweep) {
	var sw Sweep
	for {
		n, err := w.ReclaimOnce(ctx)
		sw.Reclaimed += n
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("watchdog sweep failed", "err", err)
			}
			sw.Err = err
			return w.cfg.Interval, sw
		}
		if n < w.cfg.BatchSize {
			break
		}
	}
	wait, ok, err := w.store.NextLeaseExpiry(ctx)
	if err != nil || !ok {
		return w.cfg.Interval, sw
	}
	// A few milliseconds past the expiry, so the sweep finds it expired on the
	// database clock.
	return min(max(wait+5*time.Millisecond, 5*time.Millisecond), w.cfg.Interval), sw
}

// ReclaimOnce ends up to BatchSize expired attempts and returns how many it ended.
func (w *Watchdog) ReclaimOnce(ctx context.Context) (int, error) {
	ended, err := w.reclaimer.Reclaim(ctx, w.cfg.BatchSize)
	if err != nil {
		return 0, err
	}
	for _, r := range ended {
		w.log.Info("reclaimed expired lease", "task_id", r.TaskID, "queue", r.Queue,
			"worker_id", r.WorkerID, "attempt", r.Attempt, "outcome", r.Outcome, "to_status", r.Status)
	}
	return len(ended), nil
}
