package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/taskforge/taskforge/storage"
)

// Clock is a time a test sets, for storage.WithClock: the store's lease and
// due-time statements run at it, so a test moves it past a lease expiry or a
// retry's due time instead of sleeping. Its zero value reads the zero time, which
// the store takes as the database's now(): a test may start on the real clock and
// set this one only when it needs to. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now returns the time set (zero: none).
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set makes t the time.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the time on by d and returns it.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// SetAhead sets the clock to the database's clock, read through s, plus d: "d
// from now" for statements that until now ran at the database's now().
func (c *Clock) SetAhead(tb testing.TB, s *storage.Store, d time.Duration) time.Time {
	tb.Helper()
	now, err := s.Now(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	c.Set(now.Add(d))
	return now.Add(d)
}

// Clocked returns a store on s's pools whose lease and due-time statements run at c
// (and without s's other options, such as a sealer).
func Clocked(s *storage.Store, c *Clock) *storage.Store {
	return storage.New(s.Pool(), storage.WithHotPool(s.HotPool()), storage.WithClock(c.Now))
}
