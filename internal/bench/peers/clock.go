package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// span records the first handler start and the last handler return of a drain,
// and closes done once n handlers returned.
type span struct {
	mu          sync.Mutex
	first, last time.Time
	returned    int
	n           int
	done        chan struct{}
}

func newSpan(n int) *span { return &span{n: n, done: make(chan struct{})} }

func (s *span) start() {
	now := time.Now()
	s.mu.Lock()
	if s.first.IsZero() {
		s.first = now
	}
	s.mu.Unlock()
}

func (s *span) end() {
	now := time.Now()
	s.mu.Lock()
	s.last = now
	s.returned++
	if s.returned == s.n {
		close(s.done)
	}
	s.mu.Unlock()
}

// wait waits until every handler returned and gives the rate.
func (s *span) wait(ctx context.Context) (float64, error) {
	select {
	case <-s.done:
		return s.rate(), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(10 * time.Minute):
		return 0, fmt.Errorf("drain of %d tasks did not finish", s.n)
	}
}

// rate is tasks per second over the span.
func (s *span) rate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return float64(s.n) / s.last.Sub(s.first).Seconds()
}

// latencies records each task's enqueue → handler start, and closes done once n
// arrived.
type latencies struct {
	mu   sync.Mutex
	got  []time.Duration
	n    int
	done chan struct{}
}

func newLatencies(n int) *latencies { return &latencies{n: n, done: make(chan struct{})} }

// received records a task enqueued at sentAt whose handler starts now.
func (l *latencies) received(sentAt time.Time) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, now.Sub(sentAt))
	if len(l.got) == l.n {
		close(l.done)
	}
}
