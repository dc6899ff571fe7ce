package dashboard

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/internal/view"
	"github.com/taskforge/taskforge/storage"
)

// deadTask is a dead task as the listing shows it (as GET /queues/:name/dlq does:
// died_at is always present, null or not).
type deadTask struct {
	wire.Task
	DiedAt *time.Time `json:"died_at"`
}

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
	diedAfter, err := queryTime(c, "died_after")
	if err != nil {
		fail(c, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	diedBefore, err := queryTime(c, "died_before")
	if err != nil {
		fail(c, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	from, err := decodeCursor(c.Query("cursor"))
	if err != nil {
		fail(c, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	if from == nil && diedBefore != nil {
		from = &storage.Cursor{Time: *diedBefore, ID: uuid.Max}
	}
	ok, err := d.store.QueueExists(c, queue)
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
	tasks, _, err := d.store.ListDead(c, queue, limit+1, from)
	if err != nil {
		d.log.Error("dashboard dead-letter listing", "queue", queue, "err", err)
		fail(c, http.StatusInternalServerError, "internal", "could not list dead tasks")
		return
	}
	out := make([]deadTask, 0, min(len(tasks), limit))
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
		out = append(out, deadTask{Task: view.Task(t), DiedAt: t.FinishedAt})
	}
	c.JSON(http.StatusOK, gin.H{"tasks": out, "next_cursor": encodeCursor(next)})
}

func queryTime(c *gin.Context, name string) (*time.Time, error) {
	raw := c.Query(name)
	if raw == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return nil, errors.New(name + " must be an RFC 3339 time")
	}
	return &t, nil
}

func encodeCursor(cur *storage.Cursor) *string {
	if cur == nil {
		return nil
	}
	s := base64.RawURLEncoding.EncodeToString([]byte(cur.Time.UTC().Format(time.RFC3339Nano) + "|" + cur.ID.String()))
	return &s
}

func decodeCursor(raw string) (*storage.Cursor, error) {
	if raw == "" {
		return nil, nil
	}
	if b, err := base64.RawURLEncoding.DecodeString(raw); err == nil {
		if ts, id, ok := strings.Cut(string(b), "|"); ok {
			t, errT := time.Parse(time.RFC3339Nano, ts)
			u, errU := uuid.Parse(id)
			if errT == nil && errU == nil {
				return &storage.Cursor{Time: t, ID: u}, nil
			}
		}
	}
	return nil, errors.New("cursor is not one this endpoint returned")
}
