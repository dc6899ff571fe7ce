package api

import (
	"encoding/base64"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/internal/view"
	"github.com/taskforge/taskforge/storage"
)

// The groups of a queue (fair queues, docs/flow-control.md): per-group overrides of
// the queue's group defaults, and each group's counts.

// groupParam is the :group of the path, or a 400.
func groupParam(c *gin.Context) (string, error) {
	g := c.Param("group")
	if !storage.ValidGroupName(g) {
		return "", invalid("a group is 1 to %d characters of A-Z, a-z, 0-9 and . _ : @ -", storage.MaxGroupLen)
	}
	return g, nil
}

// validGroupSettings checks the body of PUT /queues/:name/groups/:group.
func validGroupSettings(r wire.GroupSettings) error {
	switch {
	case r.Weight != nil && (*r.Weight < 1 || *r.Weight > 1000):
		return invalid("weight must be an integer from 1 to 1000, or null for 1")
	case r.MaxConcurrency != nil && (*r.MaxConcurrency < 1 || *r.MaxConcurrency > 1e6):
		return invalid("max_concurrency must be an integer from 1 to 1000000, or null for the queue's group_max_concurrency")
	case r.RateLimit != nil && !(*r.RateLimit >= 1e-6 && *r.RateLimit <= 1e6):
		return invalid("rate_limit must be a number of tasks per second from 0.000001 to 1000000, or null for the queue's group_rate_limit")
	case r.RateBurst != nil && (*r.RateBurst < 1 || *r.RateBurst > 1e6):
		return invalid("rate_burst must be an integer from 1 to 1000000, or null for the queue's group_rate_burst")
	}
	return nil
}

func (s *Server) putGroup(c *gin.Context) {
	queue := c.Param("name")
	group, err := groupParam(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	var req wire.GroupSettings
	if err := decode(c, queueBodyLimit, &req); err != nil {
		s.fail(c, err)
		return
	}
	if err := validGroupSettings(req); err != nil {
		s.fail(c, err)
		return
	}
	q, g, err := s.lc.PutGroup(c.Request.Context(), queue, group, storage.GroupSettings(req))
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, view.Group(q, g))
}

func (s *Server) getGroup(c *gin.Context) {
	queue := c.Param("name")
	group, err := groupParam(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	q, err := s.store.GetQueue(c.Request.Context(), queue)
	if err != nil {
		s.fail(c, err)
		return
	}
	g, err := s.store.GetGroup(c.Request.Context(), queue, group)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, view.Group(q, g))
}

func (s *Server) deleteGroup(c *gin.Context) {
	queue := c.Param("name")
	group, err := groupParam(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	if err := s.lc.DeleteGroup(c.Request.Context(), queue, group); err != nil {
		s.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (s *Server) listGroups(c *gin.Context) {
	queue := c.Param("name")
	limit, err := pageLimit(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	after := ""
	if raw := c.Query("cursor"); raw != "" {
		b, err := base64.RawURLEncoding.DecodeString(raw)
		if err != nil || !storage.ValidGroupName(string(b)) {
			s.fail(c, invalid("cursor is not one this list returned"))
			return
		}
		after = string(b)
	}
	var active bool
	switch c.Query("active") {
	case "", "false":
	case "true":
		active = true
	default:
		s.fail(c, invalid("active must be true or false"))
		return
	}
	q, err := s.store.GetQueue(c.Request.Context(), queue)
	if err != nil {
		s.fail(c, err)
		return
	}
	groups, last, more, err := s.store.ListGroups(c.Request.Context(), queue, after, limit, active)
	if err != nil {
		s.fail(c, err)
		return
	}
	out := wire.GroupPage{Groups: make([]wire.Group, len(groups))}
	for i, g := range groups {
		out.Groups[i] = view.Group(q, g)
	}
	if more {
		next := base64.RawURLEncoding.EncodeToString([]byte(last))
		out.NextCursor = &next
	}
	c.JSON(http.StatusOK, out)
}
