// Package tally runs the fold that keeps TaskForge's per-queue counts compact: the
// triggers of migration 0008 append each transition's count changes to a delta
// table, and a Folder moves them into the per-queue totals every Interval, so the
// readers of the counts (stats, /metrics, the dashboard) add only a few deltas.
//
// Folding never changes a figure: a delta counts the same before and after it is
// folded, so a stopped folder only makes reads slower, never wrong. Any number of
// replicas may fold at once; each delta is folded exactly once.
package tally

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/taskforge/taskforge/storage"
)

// Config tunes a Folder. Zero fields take the defaults.
type Config struct {
	// Interval is the pause between folds. Defaults to 1s.
	Interval time.Duration
	// BatchSize is the most deltas one fold statement moves. Defaults to 10000.
	BatchSize int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Interval = cmp.Or(c.Interval, time.Second)
	c.BatchSize = cmp.Or(c.BatchSize, 10000)
	return c
}

// Folder folds count deltas into the totals. Create it with New; run it with Run.
type Folder struct {
	store *storage.Store
	cfg   Config
	log   *slog.Logger
}

// New returns a Folder.
func New(store *storage.Store, cfg Config, log *slog.Logger) *Folder {
	return &Folder{store: store, cfg: cfg.WithDefaults(), log: log}
}

// Run folds at once, then every Interval, until ctx is done, and returns nil then.
// A failed fold is logged and tried again at the next interval.
func (f *Folder) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		if _, err := f.FoldOnce(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("fold of queue counts failed", "err", err)
		}
		timer.Reset(f.cfg.Interval)
	}
}

// FoldOnce folds batch after batch, the queues' deltas and then the groups'
// (migration 0025), each until a batch comes back short, and returns how many deltas
// it folded.
func (f *Folder) FoldOnce(ctx context.Context) (int, error) {
	total := 0
	for _, fold := range []func(context.Context, int) (int, error){f.store.FoldTally, f.store.FoldGroupTally} {
		for {
			n, err := fold(ctx, f.cfg.BatchSize)
			total += n
			if err != nil {
				return total, err
			}
			if n < f.cfg.BatchSize {
				break
			}
		}
	}
	return total, nil
}
