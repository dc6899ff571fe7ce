package api

import (
	"github.com/taskforge/taskforge/internal/view"

	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/internal/lifecycle"
)

// MaxTaskWait bounds wait_ms of GET /queues/:name/tasks/:id.
const MaxTaskWait = 30 * time.Second

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
	read := func() (wire.Task, bool) {
		t, attempts, err := s.store.GetTask(c.Request.Context(), queue, id)
		if err != nil {
			s.fail(c, err)
			return wire.Task{}, false
		}
		return view.TaskWithHistory(t, attempts), true
	}
	t, ok := read()
	if !ok {
		return
	}
	if wait > 0 && !lifecycle.Terminal(t.Status) {
		deadline := time.NewTimer(wait)
		defer deadline.Stop()
		ended, leave := s.lc.AwaitEnd(id)
		defer leave()
		if t, ok = read(); !ok {
			return
		}
		if !lifecycle.Terminal(t.Status) {
			select {
			case <-ended:
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
