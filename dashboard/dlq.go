package dashboard

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/view"
	"github.com/taskforge/taskforge/storage"
)

// listDead serves GET /admin/api/queues/:name/dlq: the queue's dead tasks, most
// recently died first, that died at or after died_after and at or before
// died_before (RFC 3339, both optional), limit (1..500, default 100) per page,
// continued with cursor. It composes Store.ListDead: died_before becomes the
// starting position of the keyset, and the listing stops at the first task that
// died before died_after.
func (d *Dashboard) listDead(c *gin.Context) {
	queue := c.Param("name")
	limit := 100
	if raw := c.Query("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 500 {
			fail(c, http.StatusBadRequest, "invalid_request", "limit must be an integer from 1 to 500")
			return
		}
		limit = n
	}
	diedAfter, err := view.ParseTime("died_after", c.Query("died_after"))
	if err != nil {
		fail(c, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	diedBefore, err := view.ParseTime("died_before", c.Query("died_before"))
	if err != nil {
		fail(c, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	from, err := view.DecodeCursor(c.Query("cursor"))
	if err != nil {
		fail(c, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	if from == nil && diedBefore != nil {
		from = &storage.Cursor{Time: *diedBefore, ID: uuid.Max}
	}
	ok, err := d.store.QueueExists(c.Request.Context(), queue)
	if err != nil {
		d.log.Error("dashboard dead-letter listing", "queue", queue, "err", err)
		fail(c, http.StatusInternalServerError, "internal", "could not list dead tasks")
		return
	}
	if !ok {
		fail(c, http.StatusNotFound, "queue_not_found", "no queue "+strconv.Quote(queue))
		return
	}
	// One task more than the page, to tell whether a next page holds anything.
	tasks, _, err := d.store.ListDead(c.Request.Context(), queue, limit+1, from)
	if err != nil {
		d.log.Error("dashboard dead-letter listing", "queue", queue, "err", err)
		fail(c, http.StatusInternalServerError, "internal", "could not list dead tasks")
		return
	}
	out := make([]view.DeadTask, 0, min(len(tasks), limit))
	var next *storage.Cursor
	for i, t := range tasks {
		if diedAfter != nil && t.FinishedAt != nil && t.FinishedAt.Before(*diedAfter) {
			break // newest first: every later task died earlier still
		}
		if i == limit {
			last := out[limit-1]
			next = &storage.Cursor{Time: *last.FinishedAt, ID: tasks[i-1].ID}
			break
		}
		out = append(out, view.Dead(t))
	}
	c.JSON(http.StatusOK, gin.H{"tasks": out, "next_cursor": view.EncodeCursor(next)})
}
