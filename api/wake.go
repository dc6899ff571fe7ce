package api

import (
	"sync"
)

// wakeHub parks long-polling requests until work is buffered for one of their
// queues. A wake for n tasks rouses at most n waiters of that queue, oldest first,
// so a single task does not stampede every idle worker.
type wakeHub struct {
	mu      sync.Mutex
	waiters map[string][]*waiter // queue → waiters in arrival order
}

type waiter struct {
	ch     chan struct{} // closed once when woken
	queues []string
	woken  bool
}

func newWakeHub() *wakeHub { return &wakeHub{waiters: make(map[string][]*waiter)} }

// park registers a waiter on queues. The caller must call leave when done.
func (h *wakeHub) park(queues []string) *waiter {
	w := &waiter{ch: make(chan struct{}), queues: queues}
	h.mu.Lock()
	for _, q := range queues {
		h.waiters[q] = append(h.waiters[q], w)
	}
	h.mu.Unlock()
	return w
}

// leave unregisters w.
func (h *wakeHub) leave(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.remove(w)
}

func (h *wakeHub) remove(w *waiter) {
	for _, q := range w.queues {
		list := h.waiters[q]
		for i, x := range list {
			if x == w {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(h.waiters, q)
		} else {
			h.waiters[q] = list
		}
	}
}

// wake rouses up to n waiters parked on queue and returns how many it woke.
func (h *wakeHub) wake(queue string, n int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	woke := 0
	for woke < n {
		list := h.waiters[queue]
		if len(list) == 0 {
			break
		}
		w := list[0]
		h.remove(w)
		if !w.woken {
			w.woken = true
			close(w.ch)
			woke++
		}
	}
	return woke
}
