// Package testsignal lets a background loop tell a test what it did, so that the
// test waits for that event rather than for time to pass (River's testsignal).
//
// A loop holds a Signal and calls Signal.Signal after each step. Until a test calls
// Init, a Signal is inert: Signal returns at once and costs one nil check, so
// production code pays nothing for it. Once initialised it keeps the latest
// Capacity values on a buffered channel; when nobody reads, the oldest are dropped
// rather than blocking the loop. Tests wait with WaitOrTimeout or WaitUntil, both
// bounded by Timeout and failing with a message that names the awaited event.
//
// The package never imports testing: production binaries link it.
package testsignal

import (
	"time"
)

// Timeout bounds every wait. It is generous on purpose: a wait ends as soon as the
// event happens, and only a test that is about to fail waits this long, so the
// bound is sized for a loaded machine running the race detector, not for speed.
const Timeout = 20 * time.Second

// Capacity is how many values an initialised Signal keeps unread.
const Capacity = 1000

// TB is the part of testing.TB a wait needs.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Signal carries values of one kind of event from a loop to a test. Its zero value
// is inert; Init makes it record. Init must be called before the loop starts.
type Signal[T any] struct {
	ch chan T
}

// Init makes s record the values signalled from now on.
func (s *Signal[T]) Init() {
	s.ch = make(chan T, Capacity)
}

// Signal records v when s was initialised, dropping the oldest value when s is
// full; it never blocks. It is a no-op on a nil or uninitialised Signal.
func (s *Signal[T]) Signal(v T) {
	if s == nil || s.ch == nil {
		return
	}
	for {
		select {
		case s.ch <- v:
			return
		default:
		}
		select { // full: make room, then try again
		case <-s.ch:
		default:
		}
	}
}

// C returns the channel the values arrive on (nil when s was not initialised), for
// a test that selects on it beside other events.
func (s *Signal[T]) C() <-chan T { return s.ch }

// WaitOrTimeout returns the next value signalled (the oldest unread), failing tb
// with what, the awaited event, if none comes within Timeout.
func (s *Signal[T]) WaitOrTimeout(tb TB, what string) T {
	tb.Helper()
	return s.waitOrTimeout(tb, what, Timeout)
}

func (s *Signal[T]) waitOrTimeout(tb TB, what string, timeout time.Duration) T {
	tb.Helper()
	s.mustBeInit(tb, what)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-timer.C:
		tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		panic("unreachable")
	}
}

// WaitFor returns the first value signalled, unread ones included, for which match
// is true, failing tb with what if none comes within Timeout.
func (s *Signal[T]) WaitFor(tb TB, what string, match func(T) bool) T {
	tb.Helper()
	s.mustBeInit(tb, what)
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	for {
		select {
		case v := <-s.ch:
			if match(v) {
				return v
			}
		case <-timer.C:
			tb.Fatalf("timed out after %s waiting for %s", Timeout, what)
			panic("unreachable")
		}
	}
}

// WaitUntil returns once cond holds, checking it now and again after every value
// signalled, failing tb with what if it still does not hold after Timeout. Use it
// when the loop's step is what makes cond true: cond is then checked once per step,
// never on a wall-clock beat.
func (s *Signal[T]) WaitUntil(tb TB, what string, cond func() bool) {
	tb.Helper()
	s.mustBeInit(tb, what)
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	for !cond() {
		select {
		case <-s.ch:
		case <-timer.C:
			if cond() {
				return
			}
			tb.Fatalf("timed out after %s waiting for %s", Timeout, what)
		}
	}
}

// Drain discards the values signalled so far, so that the next wait sees only
// what happens after it, and returns how many it discarded.
func (s *Signal[T]) Drain() int {
	n := 0
	for {
		select {
		case <-s.ch:
			n++
		default:
			return n
		}
	}
}

func (s *Signal[T]) mustBeInit(tb TB, what string) {
	tb.Helper()
	if s.ch == nil {
		tb.Fatalf("waiting for %s on a test signal that was never initialised (call Init before the loop starts)", what)
	}
}
