// Package ratelimit turns each queue's flow-control settings (rate limit, burst,
// concurrency cap, pause, priority aging) into the arguments of the atomic pop script,
// and keeps every replica's view of those settings fresh.
//
// Enforcement itself happens inside Redis (lua/pop.lua), in the same script that pops
// from the buffer, so no number of replicas can dispatch past a limit: a token bucket
// refilled from Redis TIME, and a set of running task ids for the concurrency cap,
// rebuilt from PostgreSQL whenever Redis loses it (lua/reconcile.lua).
//
// This package never changes a task's state.
package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/taskforge/taskforge/storage"
)

// Limits are the flow-control settings of one queue, as the pop script takes them.
type Limits struct {
	Rate           float64 // tokens per second; 0 = unlimited
	Burst          int     // bucket capacity; meaningful when Rate > 0
	MaxConcurrency int     // 0 = unlimited
	Paused         bool
	AgingMs        int64 // 0 = strict priority
}

// Of returns the limits a queue's settings ask for. The default burst is ceil(rate).
func Of(q storage.Queue) Limits {
	l := Limits{Paused: q.Paused}
	if q.RateLimit != nil {
		l.Rate = *q.RateLimit
		l.Burst = max(1, int(math.Ceil(l.Rate)))
		if q.RateBurst != nil {
			l.Burst = *q.RateBurst
		}
	}
	if q.MaxConcurrency != nil {
		l.MaxConcurrency = *q.MaxConcurrency
	}
	if q.PriorityAgingMs != nil {
		l.AgingMs = *q.PriorityAgingMs
	}
	return l
}

// RefreshInterval is how often a Settings reloads every queue's limits, which bounds
// how long a change made on another replica takes to apply here.
const RefreshInterval = 500 * time.Millisecond

// Settings is one replica's cache of every queue's limits, reloaded from PostgreSQL
// every RefreshInterval. A queue the cache has not seen yet is looked up at once.
type Settings struct {
	store *storage.Store
	log   *slog.Logger
	mu    sync.RWMutex
	byQ   map[string]Limits
}

// NewSettings returns an empty cache; call Run to keep it fresh.
func NewSettings(store *storage.Store, log *slog.Logger) *Settings {
	return &Settings{store: store, log: log, byQ: make(map[string]Limits)}
}

// Get returns queue's limits and whether the queue exists.
func (s *Settings) Get(ctx context.Context, queue string) (Limits, bool, error) {
	s.mu.RLock()
	l, ok := s.byQ[queue]
	s.mu.RUnlock()
	if ok {
		return l, true, nil
	}
	q, err := s.store.GetQueue(ctx, queue)
	if err != nil {
		if isNotFound(err) {
			return Limits{}, false, nil
		}
		return Limits{}, false, err
	}
	s.Set(q)
	return Of(q), true, nil
}

// Set records a queue's settings at once (this replica just changed them).
func (s *Settings) Set(q storage.Queue) {
	s.mu.Lock()
	s.byQ[q.Name] = Of(q)
	s.mu.Unlock()
}

// Forget drops a deleted queue.
func (s *Settings) Forget(queue string) {
	s.mu.Lock()
	delete(s.byQ, queue)
	s.mu.Unlock()
}

// Refresh reloads every queue's limits.
func (s *Settings) Refresh(ctx context.Context) error {
	qs, err := s.store.ListQueues(ctx)
	if err != nil {
		return err
	}
	byQ := make(map[string]Limits, len(qs))
	for _, q := range qs {
		byQ[q.Name] = Of(q)
	}
	s.mu.Lock()
	s.byQ = byQ
	s.mu.Unlock()
	return nil
}

// Run refreshes the cache every RefreshInterval until ctx is done.
func (s *Settings) Run(ctx context.Context) error {
	t := time.NewTicker(RefreshInterval)
	defer t.Stop()
	for {
		if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("could not refresh queue settings; using the last known", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func isNotFound(err error) bool {
	return errors.Is(err, storage.ErrQueueNotFound)
}
