package api

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// StatusBlocked is the status of a workflow task waiting on its parents. Bulk cancel
// accepts it already; until workflows create such tasks it matches none.
const StatusBlocked = "blocked"

// bulkStatuses maps the status a bulk cancel names to the stored statuses it
// cancels: pending includes claimed, which is a pending task mirrored into the
// Redis buffer.
var bulkStatuses = map[string][]string{
	storage.StatusPending: {storage.StatusPending, storage.StatusClaimed},
	storage.StatusRetry:   {storage.StatusRetry},
	StatusBlocked:         {StatusBlocked},
}

type bulkCancelRequest struct {
	IDs    []uuid.UUID `json:"ids"`
	Status *string     `json:"status"`
}

// bulkBatch is the number of rows per transaction of bulk operations; tests lower it.
func (s *Server) bulkBatch() int {
	if s.bulkRows > 0 {
		return s.bulkRows
	}
	return storage.BulkBatch
}

// onBulkBatch reports a committed batch of n rows to the test hook, if any.
func (s *Server) onBulkBatch(n int) {
	if s.afterBulkBatch != nil {
		s.afterBulkBatch(n)
	}
}

func (s *Server) cancelMany(c *gin.Context) {
	var req bulkCancelRequest
	if err := decode(c, 1<<20, &req); err != nil {
		s.fail(c, err)
		return
	}
	if (req.Status != nil) == (len(req.IDs) > 0) {
		s.fail(c, invalid(`give either "ids" (1 to %d task ids) or "status" (pending, retry or blocked)`, MaxBatch))
		return
	}
	if len(req.IDs) > MaxBatch {
		s.fail(c, invalid("ids may list at most %d tasks", MaxBatch))
		return
	}
	var statuses []string
	if req.Status != nil {
		if statuses = bulkStatuses[*req.Status]; statuses == nil {
			s.fail(c, invalid("status must be pending, retry or blocked"))
			return
		}
	}
	queue := c.Param("name")
	cancelled, requested := 0, 0
	each := func(batch []storage.BulkCancelled) {
		s.onBulkBatch(len(batch))
		var ended, buffered []uuid.UUID
		for _, t := range batch {
			if t.FromStatus == storage.StatusExecuting {
				requested++
				continue
			}
			cancelled++
			ended = append(ended, t.ID)
			if t.FromStatus == storage.StatusClaimed {
				buffered = append(buffered, t.ID)
			}
			s.cfg.Telemetry.Transition(telemetry.Transition{TaskID: t.ID, Queue: queue, From: t.FromStatus,
				To: storage.StatusCancelled, Attempt: t.Attempts, Reason: "cancelled by bulk request"})
		}
		ctx := context.WithoutCancel(c)
		// A claim would skip these ids anyway (they are no longer claimed); removing
		// them keeps them from taking a poll's place.
		if len(buffered) > 0 {
			if err := s.buf.Remove(ctx, queue, buffered...); err != nil {
				s.log.Warn("cancelled tasks left in buffer", "queue", queue, "tasks", len(buffered), "err", err)
			}
		}
		s.AnnounceTerminal(ctx, ended...)
	}
	var err error
	if statuses != nil {
		_, err = s.store.CancelWaiting(c, queue, statuses, s.bulkBatch(), each)
	} else {
		var batch []storage.BulkCancelled
		if batch, err = s.store.CancelTasks(c, queue, req.IDs); err == nil && len(batch) > 0 {
			each(batch)
		}
	}
	if err != nil {
		if cancelled+requested > 0 { // the batches before the failure stay committed
			s.log.Warn("bulk cancel stopped early", "queue", queue, "cancelled", cancelled, "err", err)
		}
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"cancelled": cancelled, "cancel_requested": requested})
}

func (s *Server) discardMany(c *gin.Context) {
	req, err := decodeDeadSelection(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	n, err := s.store.DiscardDeadMany(c, c.Param("name"), req.IDs, req.All, s.bulkBatch(), s.onBulkBatch)
	if err != nil {
		if n > 0 { // the batches before the failure stay committed
			s.log.Warn("bulk discard stopped early", "queue", c.Param("name"), "discarded", n, "err", err)
		}
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"discarded": n})
}
