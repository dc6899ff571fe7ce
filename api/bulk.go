package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/storage"
)

// StatusBlocked is the status of a workflow task waiting on its parents. Bulk cancel
// accepts it already; until workflows create such tasks it matches none.
const StatusBlocked = "blocked"

// bulkStatuses maps the status a bulk cancel names to the stored statuses it
// cancels: pending includes claimed, which is a pending task mirrored into the
// Redis buffer.
var bulkStatuses = map[string][]string{
	storage.StatusPending: {storage.StatusPending, storage.StatusBuffered},
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
	cancelled, requested, err := s.lc.CancelMany(c.Request.Context(), queue, lifecycle.CancelSelection{IDs: req.IDs, Statuses: statuses,
		Rows: s.bulkBatch(), AfterBatch: s.onBulkBatch})
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
	n, err := s.lc.DiscardMany(c.Request.Context(), c.Param("name"), req.IDs, req.All, s.bulkBatch(), s.onBulkBatch)
	if err != nil {
		if n > 0 { // the batches before the failure stay committed
			s.log.Warn("bulk discard stopped early", "queue", c.Param("name"), "discarded", n, "err", err)
		}
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"discarded": n})
}
