package api

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
)

// MaxTaskWait bounds wait_ms of GET /queues/:name/tasks/:id.
const MaxTaskWait = 30 * time.Second

// doneHub parks requests awaiting a task's end until the task becomes terminal. It is
// local to a replica; the done channel (buffer.DoneChannel), which every replica hears,
// carries the news from whichever replica made the transition.
type doneHub struct {
	mu      sync.Mutex
	waiters map[uuid.UUID][]*doneWaiter
}

type doneWaiter struct {
	ch    chan struct{} // closed once when the task is announced terminal
	woken bool
}

func newDoneHub() *doneHub { return &doneHub{waiters: make(map[uuid.UUID][]*doneWaiter)} }

// park registers a waiter on task id. The caller must call leave when done.
func (h *doneHub) park(id uuid.UUID) *doneWaiter {
	w := &doneWaiter{ch: make(chan struct{})}
	h.mu.Lock()
	h.waiters[id] = append(h.waiters[id], w)
	h.mu.Unlock()
	return w
}

// leave unregisters w from id.
func (h *doneHub) leave(id uuid.UUID, w *doneWaiter) {
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

// wake rouses every waiter of the given tasks.
func (h *doneHub) wake(ids []uuid.UUID) {
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

// count returns how many requests wait.
func (h *doneHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, list := range h.waiters {
		n += len(list)
	}
	return n
}

// AnnounceTerminal tells the waiters of every replica that the tasks ids became
// terminal (done, dead or cancelled). Every code path that ends a task calls it
// after the transition committed; this replica's waiters are woken at once, the
// others through Redis. A failed publish is logged: the others' waiters then answer
// at their deadline.
func (s *Server) AnnounceTerminal(ctx context.Context, ids ...uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	s.done.wake(ids)
	if err := s.buf.PublishDone(context.WithoutCancel(ctx), ids...); err != nil {
		s.log.Warn("finished tasks not announced; other replicas' waiters answer at their deadline",
			"tasks", len(ids), "err", err)
	}
}

// terminal reports whether status is one a task never leaves.
func terminal(status string) bool {
	return status == storage.StatusDone || status == storage.StatusDead || status == storage.StatusCancelled
}

// taskWait reads the wait_ms query parameter: 0..30000, default 0.
func taskWait(c *gin.Context) (time.Duration, error) {
	raw, ok := c.GetQuery("wait_ms")
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n > int(MaxTaskWait/time.Millisecond) {
		return 0, invalid("wait_ms must be an integer from 0 to %d", MaxTaskWait/time.Millisecond)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// awaitTask answers GET /queues/:name/tasks/:id?wait_ms=N: the task at once when it is
// terminal or wait is zero, else when it becomes terminal or the wait ends, with the
// task as it is then. It reads PostgreSQL at most three times: before parking, once
// after parking (a transition between the first read and the parking would otherwise
// go unheard), and once when woken or when the wait ends. While parked it costs
// PostgreSQL nothing.
func (s *Server) awaitTask(c *gin.Context, queue string, id uuid.UUID, wait time.Duration) {
	read := func() (taskWithHistory, bool) {
		t, attempts, err := s.store.GetTask(c, queue, id)
		if err != nil {
			s.fail(c, err)
			return taskWithHistory{}, false
		}
		if attempts == nil {
			attempts = []storage.Attempt{}
		}
		return taskWithHistory{Task: t, AttemptHistory: attempts}, true
	}
	t, ok := read()
	if !ok {
		return
	}
	if wait > 0 && !terminal(t.Status) {
		deadline := time.NewTimer(wait)
		defer deadline.Stop()
		w := s.done.park(id)
		defer s.done.leave(id, w)
		if t, ok = read(); !ok {
			return
		}
		if !terminal(t.Status) {
			select {
			case <-w.ch:
			case <-deadline.C:
			case <-s.draining:
			case <-c.Done():
				return // the caller hung up: nobody to answer
			}
			if t, ok = read(); !ok {
				return
			}
		}
	}
	c.JSON(http.StatusOK, t)
}
