package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/view"
	"github.com/taskforge/taskforge/storage"
)

func (s *Server) listDead(c *gin.Context) {
	queue := c.Param("name")
	limit, after, err := page(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	if ok, err := s.store.QueueExists(c.Request.Context(), queue); err != nil || !ok {
		s.fail(c, cmpErr(err, storage.ErrQueueNotFound))
		return
	}
	tasks, next, err := s.store.ListDead(c.Request.Context(), queue, limit, after)
	if err != nil {
		s.fail(c, err)
		return
	}
	out := make([]view.DeadTask, len(tasks))
	for i, t := range tasks {
		out[i] = view.Dead(t)
	}
	c.JSON(http.StatusOK, gin.H{"tasks": out, "next_cursor": view.EncodeCursor(next)})
}

func (s *Server) replayOne(c *gin.Context) {
	id, err := taskID(c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	queue := c.Param("name")
	tasks, err := s.lc.Replay(c.Request.Context(), queue, []uuid.UUID{id}, false)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, view.Task(tasks[0]))
}

// deadSelection names dead tasks for a bulk replay or discard: some ids, or all.
type deadSelection struct {
	IDs []uuid.UUID `json:"ids"`
	All bool        `json:"all"`
}

// decodeDeadSelection reads a deadSelection: exactly one of 1..MaxBatch ids or
// "all": true.
func decodeDeadSelection(c *gin.Context) (deadSelection, error) {
	var req deadSelection
	if err := decode(c, 1<<20, &req); err != nil {
		return req, err
	}
	if req.All == (len(req.IDs) > 0) {
		return req, invalid(`give either "ids" (1 to %d task ids) or "all": true`, MaxBatch)
	}
	if len(req.IDs) > MaxBatch {
		return req, invalid("ids may list at most %d tasks", MaxBatch)
	}
	return req, nil
}

func (s *Server) replayMany(c *gin.Context) {
	req, err := decodeDeadSelection(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	queue := c.Param("name")
	tasks, err := s.lc.Replay(c.Request.Context(), queue, req.IDs, req.All)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"replayed": view.Tasks(tasks)})
}

func (s *Server) discardDead(c *gin.Context) {
	id, err := taskID(c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	if err := s.lc.Discard(c.Request.Context(), c.Param("name"), id); err != nil {
		s.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
