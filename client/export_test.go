package client

import "time"

// SetWorkerClock makes w read the time from now and wait with after: a test's
// clock, so that lease estimates are tested without waiting for leases to run out.
func SetWorkerClock(w *Worker, now func() time.Time, after func(time.Duration) <-chan time.Time) {
	w.clock = funcClock{now: now, after: after}
}

type funcClock struct {
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
}

func (c funcClock) Now() time.Time                         { return c.now() }
func (c funcClock) After(d time.Duration) <-chan time.Time { return c.after(d) }

// SetOnPark makes w's poller call f each time it parks with nothing to ask for
// (every slot and the prefetch room taken): from then until a slot frees, a
// handler that returns leaves its ack to the next poll.
func SetOnPark(w *Worker, f func()) { w.onPark = f }
