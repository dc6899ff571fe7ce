package dispatcher

import (
	"sync"
	"time"
)

// Wakes collects the wake-ups of one replica's dispatcher until its next pass: the
// queues to dispatch (Wake, WakeLow) and whether to look at every queue (WakeAll).
// The lifecycle posts to it (a *Wakes is a lifecycle.Waker), so do the dispatcher's
// LISTEN loop and its own failed passes; Dispatcher.Run takes them. It stands apart
// from the Dispatcher because each needs the other's half at construction: the
// lifecycle tells the dispatcher of work its transitions leave, and the dispatcher
// dispatches through the lifecycle. Build the Wakes first, then the lifecycle on it,
// then the Dispatcher on both.
type Wakes struct {
	// signal has a pass run soon; what it should do is in wanted and sweep.
	signal chan struct{}

	mu      sync.Mutex
	wanted  map[string]struct{} // queues the next pass dispatches
	sweep   bool                // the next pass looks at every queue
	lowWake map[string]time.Time
}

// NewWakes returns an empty Wakes.
func NewWakes() *Wakes {
	return &Wakes{signal: make(chan struct{}, 1), wanted: map[string]struct{}{}, lowWake: map[string]time.Time{}}
}

// LowWater is the buffer size below which a poll asks for a refill (WakeLow), so a
// backlog in PostgreSQL keeps flowing without waiting for a tick.
const LowWater = 250

// lowWakeEvery bounds how often pops of a nearly empty buffer wake the dispatcher
// for one queue.
const lowWakeEvery = 20 * time.Millisecond

// WakeLow asks for a refill of queue because its buffer fell below LowWater; calls
// for the same queue closer together than lowWakeEvery are merged, so an empty
// backlog costs few passes.
func (w *Wakes) WakeLow(queue string) {
	now := time.Now()
	w.mu.Lock()
	if now.Sub(w.lowWake[queue]) < lowWakeEvery {
		w.mu.Unlock()
		return
	}
	if len(w.lowWake) > 4096 { // forget old entries rather than every queue ever seen
		clear(w.lowWake)
	}
	w.lowWake[queue] = now
	w.wanted[queue] = struct{}{}
	w.mu.Unlock()
	w.poke()
}

// Wake asks for queue to be dispatched as soon as possible.
func (w *Wakes) Wake(queue string) {
	w.mu.Lock()
	w.wanted[queue] = struct{}{}
	w.mu.Unlock()
	w.poke()
}

// WakeAll asks for a sweep of every queue as soon as possible (after wake-ups may
// have been missed).
func (w *Wakes) WakeAll() {
	w.mu.Lock()
	w.sweep = true
	w.mu.Unlock()
	w.poke()
}

func (w *Wakes) poke() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// take returns, and forgets, the queues woken and whether a sweep was asked for.
func (w *Wakes) take() (queues []string, sweep bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	queues = make([]string, 0, len(w.wanted))
	for q := range w.wanted {
		queues = append(queues, q)
	}
	clear(w.wanted)
	sweep, w.sweep = w.sweep, false
	return queues, sweep
}

// again has the next pass dispatch queues, without hurrying it.
func (w *Wakes) again(queues []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range queues {
		w.wanted[q] = struct{}{}
	}
}
