package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// AuditEntry is one operator action the server recorded (GET /audit).
type AuditEntry struct {
	ID         int64           `json:"id"`
	At         time.Time       `json:"at"`
	Actor      string          `json:"actor"`    // the token's name, or "anonymous" on an open API
	TokenID    *string         `json:"token_id"` // nil on an open API
	Via        string          `json:"via"`      // token, session or open
	RemoteAddr string          `json:"remote_addr"`
	Method     string          `json:"method"`
	Route      string          `json:"route"` // the route pattern, e.g. /queues/:name
	Queue      *string         `json:"queue"`
	Target     *string         `json:"target"` // the task, dead task or token id, if any
	Status     int             `json:"status"` // the HTTP status the server answered
	Request    json.RawMessage `json:"request"`
}

// AuditPage is one page of the audit log, newest first.
type AuditPage struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor string       `json:"next_cursor"` // empty on the last page
}

// ListAudit returns a page of the audit log, newest first (admin). queue filters
// to one queue when not empty; limit is 1..500 (0: the server's 100); cursor is the
// previous page's NextCursor, or empty.
func (c *Client) ListAudit(ctx context.Context, queue string, limit int, cursor string) (*AuditPage, error) {
	q := url.Values{}
	if queue != "" {
		q.Set("queue", queue)
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out AuditPage // a null next_cursor leaves NextCursor empty
	if _, _, err := c.do(ctx, http.MethodGet, "/audit", q, nil, &out); err != nil {
		return nil, fmt.Errorf("list the audit log: %w", err)
	}
	return &out, nil
}
