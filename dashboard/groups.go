package dashboard

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/internal/view"
	"github.com/taskforge/taskforge/storage"
)

// listBusyGroups serves GET /admin/api/queues/:name/groups: a page of the queue's
// groups with unfinished or dead tasks, busiest first (pending + claimed +
// executing, as the last fold counted them), then by name; each as the API shows a
// group (overrides, settings in effect, exact counts). limit is 1..500 (default
// 50), cursor continues after the previous page. The public API lists groups by
// name only; a page here costs its own length however many groups the queue has
// (storage.BusiestGroups).
func (d *Dashboard) listBusyGroups(c *gin.Context) {
	queue := c.Param("name")
	limit := 50
	if raw := c.Query("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 500 {
			fail(c, http.StatusBadRequest, "invalid_request", "limit must be an integer from 1 to 500")
			return
		}
		limit = n
	}
	from, err := decodeBusyCursor(c.Query("cursor"))
	if err != nil {
		fail(c, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	q, err := d.store.GetQueue(c.Request.Context(), queue)
	if errors.Is(err, storage.ErrQueueNotFound) {
		fail(c, http.StatusNotFound, "queue_not_found", "no queue "+strconv.Quote(queue))
		return
	}
	var groups []storage.Group
	var next *storage.BusyPosition
	if err == nil {
		groups, next, err = d.store.BusiestGroups(c.Request.Context(), queue, from, limit)
	}
	if err != nil {
		d.log.Error("dashboard group listing", "queue", queue, "err", err)
		fail(c, http.StatusInternalServerError, "internal", "could not list groups")
		return
	}
	out := wire.GroupPage{Groups: make([]wire.Group, len(groups))}
	for i, g := range groups {
		out.Groups[i] = view.Group(q, g)
	}
	if next != nil {
		s := encodeBusyCursor(*next)
		out.NextCursor = &s
	}
	c.JSON(http.StatusOK, out)
}

// encodeBusyCursor is p as an opaque cursor: "<busy> <group>", base64url (a group
// name holds no space).
func encodeBusyCursor(p storage.BusyPosition) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.Busy, 10) + " " + p.Name))
}

// decodeBusyCursor reads a cursor of encodeBusyCursor; "" is the start (nil).
func decodeBusyCursor(raw string) (*storage.BusyPosition, error) {
	if raw == "" {
		return nil, nil
	}
	bad := errors.New("cursor is not one this list returned")
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return nil, bad
	}
	busy, name, ok := strings.Cut(string(b), " ")
	n, err := strconv.ParseInt(busy, 10, 64)
	if !ok || err != nil || n < 0 || !storage.ValidGroupName(name) {
		return nil, bad
	}
	return &storage.BusyPosition{Busy: n, Name: name}, nil
}
