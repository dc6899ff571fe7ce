package lifecycle

import (
	"context"
	"sync"

	"github.com/google/uuid"
)

// endHub parks callers awaiting a task's end until the task becomes terminal. It is
// local to a replica; the done channel (buffer.DoneChannel), which every replica
// hears, carries the news from whichever replica made the transition.
type endHub struct {
	mu      sync.Mutex
	waiters map[uuid.UUID][]*endWaiter
}

type endWaiter struct {
	ch    chan struct{} // closed once when the task is announced terminal
	woken bool
}

func newEndHub() *endHub { return &endHub{waiters: make(map[uuid.UUID][]*endWaiter)} }

func (h *endHub) park(id uuid.UUID) *endWaiter {
	w := &endWaiter{ch: make(chan struct{})}
	h.mu.Lock()
	h.waiters[id] = append(h.waiters[id], w)
	h.mu.Unlock()
	return w
}

func (h *endHub) leave(id uuid.UUID, w *endWaiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.waiters[id]
	for i, x := range list {
		if x == w {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(h.waiters, id)
	} else {
		h.waiters[id] = list
	}
}

func (h *endHub) wake(ids []uuid.UUID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		for _, w := range h.waiters[id] {
			if !w.woken {
				w.woken = true
				close(w.ch)
			}
		}
		delete(h.waiters, id)
	}
}

func (h *endHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, list := range h.waiters {
		n += len(list)
	}
	return n
}

// AwaitEnd registers the caller as waiting for task id to become terminal: ended
// closes when this or another replica announces it. Register before the last read
// of the task, so that an end between the two is not missed, and call leave when
// done waiting.
func (l *Lifecycle) AwaitEnd(id uuid.UUID) (ended <-chan struct{}, leave func()) {
	w := l.ended.park(id)
	return w.ch, func() { l.ended.leave(id, w) }
}

// HearEnded wakes this replica's waiters of tasks ids, which a replica announced
// terminal on the buffer's done channel.
func (l *Lifecycle) HearEnded(ids []uuid.UUID) { l.ended.wake(ids) }

// Waiting returns how many callers wait for a task to end on this replica.
func (l *Lifecycle) Waiting() int { return l.ended.count() }

// announceEnded tells the waiters of every replica that tasks ids became terminal
// (done, dead or cancelled); every transition that ends a task calls it after its
// statement committed. This replica's waiters are woken at once, the others through
// Redis, published by Run off the caller's path (by the caller when Run does not
// run). A failed publish is logged: the others' waiters then answer at their
// deadline.
func (l *Lifecycle) announceEnded(ctx context.Context, ids ...uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	l.ended.wake(ids)
	l.announcer.announce(ctx, ids)
}
