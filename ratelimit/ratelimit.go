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
	// Push: the queue delivers to an HTTP target (package push); polls may not name it.
	Push bool
	// Fair: the queue's fairness is "round_robin": its tasks are buffered and popped
	// by group (buffer.FairPop), within the group limits below beside the queue's.
	Fair bool
	// GroupMaxConcurrency, GroupRate and GroupBurst are a fair queue's defaults for
	// each group (group_max_concurrency, group_rate_limit, group_rate_burst); 0 =
	// unlimited, and a zero burst is the ceiling of the rate.
	GroupMaxConcurrency int
	GroupRate           float64
	GroupBurst          int
}

// Of returns the limits a queue's settings ask for. The default burst is ceil(rate).
func Of(q storage.Queue) Limits {
	l := Limits{Paused: q.Paused, Push: q.Push != nil}
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
	if q.Fairness != nil && *q.Fairness == storage.FairnessRoundRobin {
		l.Fair = true
		if q.GroupMaxConcurrency != nil {
			l.GroupMaxConcurrency = *q.GroupMaxConcurrency
		}
		if q.GroupRateLimit != nil {
			l.GroupRate = *q.GroupRateLimit
			if q.GroupRateBurst != nil {
				l.GroupBurst = *q.GroupRateBurst
			}
		}
	}
	return l
}

// RefreshInterval is how often a Settings reads the queues changed since its last
// look, which bounds how long a change made on another replica takes to apply here.
const RefreshInterval = 500 * time.Millisecond

// FullRefreshInterval is how often a Settings reloads every queue, which bounds how
// long a queue deleted on another replica stays in this cache.
const FullRefreshInterval = time.Minute

// changeSlack is how far before its last look a refresh reads: a change whose
// transaction took its updated_at before that look but committed after it is
// still seen.
const changeSlack = 5 * time.Second

// Settings is one replica's cache of every queue's limits: it reads the queues
// changed since its last look every RefreshInterval (a cost that follows the
// changes, not the number of queues) and reloads them all every
// FullRefreshInterval. A queue the cache has not seen yet is looked up at once.
type Settings struct {
	store *storage.Store
	log   *slog.Logger
	mu    sync.RWMutex
	byQ   map[string]Limits

	refreshMu sync.Mutex
	since     time.Time // database clock of the last look
	lastFull  time.Time
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

// IsFair reports whether queue's fairness is round_robin (false for a queue that does
// not exist), from the cache as Get.
func (s *Settings) IsFair(ctx context.Context, queue string) (bool, error) {
	l, _, err := s.Get(ctx, queue)
	return l.Fair, err
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

// Refresh reads the queues changed since the last call, or every queue when the last
// full reload is FullRefreshInterval old.
func (s *Settings) Refresh(ctx context.Context) error {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	if s.since.IsZero() || time.Since(s.lastFull) >= FullRefreshInterval {
		return s.reloadAll(ctx)
	}
	qs, now, err := s.store.QueuesChangedSince(ctx, s.since.Add(-changeSlack))
	if err != nil {
		return err
	}
	s.mu.Lock()
	for _, q := range qs {
		s.byQ[q.Name] = Of(q)
	}
	s.mu.Unlock()
	s.since = now
	return nil
}

// reloadAll replaces the cache with every queue's limits.
func (s *Settings) reloadAll(ctx context.Context) error {
	now, err := s.store.Now(ctx)
	if err != nil {
		return err
	}
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
	s.since, s.lastFull = now, time.Now()
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
