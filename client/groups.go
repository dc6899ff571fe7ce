package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/taskforge/taskforge/client/wire"
)

// GroupSettings are a group's overrides of its queue's group defaults; nil keeps
// the queue's default (weight: 1).
type GroupSettings = wire.GroupSettings

// GroupLimits are the settings in force for a group: its overrides, else its
// queue's group defaults; nil = unlimited.
type GroupLimits = wire.GroupLimits

// GroupCounts are a group's tasks by status (exact).
type GroupCounts = wire.GroupCounts

// Group is a group of a fair queue: its overrides, the settings in force, and its
// tasks by status (exact).
type Group = wire.Group

// GroupPage is a page of ListGroups; NextCursor is "" on the last page.
type GroupPage struct {
	Groups     []Group `json:"groups"`
	NextCursor string  `json:"next_cursor"`
}

// GroupFilter selects the groups ListGroups returns.
type GroupFilter struct {
	Active bool   // only groups with pending, claimed or executing tasks
	Limit  int    // 1..500; 0 = the server's default (100)
	Cursor string // the previous page's NextCursor
}

func groupPath(queue, group string) string {
	return "/queues/" + esc(queue) + "/groups/" + esc(group)
}

// PutGroup replaces group's overrides of queue's group defaults; the next pop of
// every replica applies them.
func (c *Client) PutGroup(ctx context.Context, queue, group string, s GroupSettings) (*Group, error) {
	var g Group
	if _, _, err := c.do(ctx, http.MethodPut, groupPath(queue, group), nil, s, &g); err != nil {
		return nil, fmt.Errorf("put group %q of %q: %w", group, queue, err)
	}
	return &g, nil
}

// GetGroup returns group of queue, or ErrGroupNotFound.
func (c *Client) GetGroup(ctx context.Context, queue, group string) (*Group, error) {
	var g Group
	if _, _, err := c.do(ctx, http.MethodGet, groupPath(queue, group), nil, nil, &g); err != nil {
		return nil, fmt.Errorf("get group %q of %q: %w", group, queue, err)
	}
	return &g, nil
}

// DeleteGroup forgets group's overrides; its tasks stay.
func (c *Client) DeleteGroup(ctx context.Context, queue, group string) error {
	if _, _, err := c.do(ctx, http.MethodDelete, groupPath(queue, group), nil, nil, nil); err != nil {
		return fmt.Errorf("delete group %q of %q: %w", group, queue, err)
	}
	return nil
}

// ListGroups returns a page of queue's groups by name.
func (c *Client) ListGroups(ctx context.Context, queue string, f GroupFilter) (*GroupPage, error) {
	q := url.Values{}
	if f.Active {
		q.Set("active", "true")
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Cursor != "" {
		q.Set("cursor", f.Cursor)
	}
	var p wire.GroupPage
	if _, _, err := c.do(ctx, http.MethodGet, "/queues/"+esc(queue)+"/groups", q, nil, &p); err != nil {
		return nil, fmt.Errorf("list groups of %q: %w", queue, err)
	}
	out := &GroupPage{Groups: p.Groups}
	if p.NextCursor != nil {
		out.NextCursor = *p.NextCursor
	}
	return out, nil
}
