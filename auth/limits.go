package auth

import (
	"math"
	"sync"
	"time"

	"github.com/google/uuid"
)

// rateLimiter keeps one token bucket per API token, in memory: the limit holds per
// replica (a fleet of n replicas allows n times the rate at most).
type rateLimiter struct {
	buckets sync.Map // uuid.UUID → *bucket
}

type bucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newRateLimiter() *rateLimiter { return &rateLimiter{} }

// take spends one request of token id's bucket (rate per second, burst size). When
// the bucket is empty it returns false and how long until a request is allowed.
func (r *rateLimiter) take(id uuid.UUID, now time.Time, rate, burst float64) (bool, time.Duration) {
	v, ok := r.buckets.Load(id)
	if !ok {
		v, _ = r.buckets.LoadOrStore(id, &bucket{tokens: burst, last: now})
	}
	b := v.(*bucket)
	b.mu.Lock()
	defer b.mu.Unlock()
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = math.Min(burst, b.tokens+elapsed*rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / rate * float64(time.Second))
	return false, wait
}

// pollLimiter bounds the concurrent long polls of each worker id on this replica.
type pollLimiter struct {
	max    int
	mu     sync.Mutex
	active map[string]int
}

func newPollLimiter(max int) *pollLimiter {
	return &pollLimiter{max: max, active: make(map[string]int)}
}

// acquire reserves a long-poll slot of worker; false when it holds max already.
func (p *pollLimiter) acquire(worker string) bool {
	if p.max < 0 {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active[worker] >= p.max {
		return false
	}
	p.active[worker]++
	return true
}

func (p *pollLimiter) release(worker string) {
	if p.max < 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active[worker]--; p.active[worker] <= 0 {
		delete(p.active, worker)
	}
}
