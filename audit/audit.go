// Package audit records operator actions: who created, changed, paused, resumed or
// deleted a queue, cancelled a task, replayed or discarded dead tasks, created, changed,
// deleted or triggered a schedule, or minted or revoked a token; when, from which address, with what request, and what the API
// answered. The routes it records are those whose auth.Rule says Audit.
//
// The middleware runs after authentication, so it records what authorized callers
// did, refused requests included (a 400 or 409 says what was attempted), but not
// requests the auth middleware turned away (401, 403): those cost an unauthenticated
// caller nothing and would let anyone fill the table. The entry is written after
// the action, in its own statement: should that write fail, the action stands and
// the entry goes to the log instead (level ERROR, "audit entry not recorded").
// Every entry is also logged at INFO ("audit"), for log pipelines.
package audit

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/storage"
)

// MaxRequestBytes is the largest request body kept with an entry; a longer one is
// recorded as {"omitted_bytes": n} (at least n).
const MaxRequestBytes = 4 << 10

// writeTimeout bounds the insert of one entry.
const writeTimeout = 5 * time.Second

// Recorder writes audit entries. Create it with New.
type Recorder struct {
	store *storage.Store
	log   *slog.Logger
}

// New returns a Recorder that writes to store and logs to log.
func New(store *storage.Store, log *slog.Logger) *Recorder {
	return &Recorder{store: store, log: log}
}

// Middleware records every request to an audited route that reaches its handler.
// Install it after the auth middleware.
func (r *Recorder) Middleware() gin.HandlerFunc {
	audited := auth.Audited() // looked up without allocating: this runs on every poll and ack
	return func(c *gin.Context) {
		if !audited[c.Request.Method][c.FullPath()] {
			c.Next()
			return
		}
		// Keep the head of the body and hand the handler the whole stream.
		var head []byte
		if c.Request.Body != nil {
			head, _ = io.ReadAll(io.LimitReader(c.Request.Body, MaxRequestBytes+1))
			c.Request.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(head), c.Request.Body), c.Request.Body}
		}
		c.Next()
		r.record(c, entry(c, head))
	}
}

// entry describes the request c answered, with head the start of its body.
func entry(c *gin.Context, head []byte) storage.AuditEntry {
	e := storage.AuditEntry{Actor: "anonymous", Via: "open", RemoteAddr: remoteAddr(c), Method: c.Request.Method,
		Route: c.FullPath(), Status: c.Writer.Status(), Request: requestBody(head)}
	if p := auth.FromContext(c); p != nil {
		id := p.TokenID
		e.Actor, e.TokenID, e.Via = p.Name, &id, "token"
		if e.Actor == "" {
			e.Actor = "token " + id.String()
		}
		if p.Session {
			e.Via = "session"
		}
	}
	if strings.HasPrefix(e.Route, "/schedules") { // :name is the schedule's; the body may name its queue
		var body struct {
			Name  string `json:"name"`
			Queue string `json:"queue"`
		}
		_ = json.Unmarshal(head, &body)
		if v := cmp.Or(c.Param("name"), body.Name); v != "" && len(v) <= 200 {
			e.Target = &v
		}
		if body.Queue != "" && len(body.Queue) <= 200 {
			e.Queue = &body.Queue
		}
		return e
	}
	if v := c.Param("name"); v != "" {
		e.Queue = &v
	} else if e.Route == "/queues" { // a queue's creation names it in the body
		var body struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(head, &body) == nil && body.Name != "" && len(body.Name) <= 200 {
			e.Queue = &body.Name
		}
	}
	if v := c.Param("id"); v != "" {
		e.Target = &v
	}
	return e
}

// requestBody is what an entry keeps of a body: the JSON itself when it is valid
// and short enough, else how much was left out.
func requestBody(head []byte) json.RawMessage {
	switch {
	case len(bytes.TrimSpace(head)) == 0:
		return nil
	case len(head) <= MaxRequestBytes && json.Valid(head):
		var compact bytes.Buffer
		if json.Compact(&compact, head) == nil {
			return compact.Bytes()
		}
	}
	return json.RawMessage(`{"omitted_bytes": ` + strconv.Itoa(len(head)) + `}`)
}

// remoteAddr is the TCP peer, with the X-Forwarded-For header when one came (kept
// apart: anyone can send it).
func remoteAddr(c *gin.Context) string {
	addr := c.RemoteIP()
	if fwd := c.GetHeader("X-Forwarded-For"); fwd != "" {
		addr += " (X-Forwarded-For: " + fwd + ")"
	}
	if len(addr) > 300 {
		addr = addr[:300]
	}
	return addr
}

// record writes e, or logs it when the write fails.
func (r *Recorder) record(c *gin.Context, e storage.AuditEntry) {
	attrs := []any{"actor", e.Actor, "via", e.Via, "method", e.Method, "route", e.Route, "status", e.Status,
		"remote_addr", e.RemoteAddr}
	if e.Queue != nil {
		attrs = append(attrs, "queue", *e.Queue)
	}
	if e.Target != nil {
		attrs = append(attrs, "target", *e.Target)
	}
	r.log.Info("audit", attrs...)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c), writeTimeout)
	defer cancel()
	if err := r.store.InsertAudit(ctx, e); err != nil {
		r.log.Error("audit entry not recorded", append(attrs, "request", string(e.Request), "err", err)...)
	}
}

// Mount adds GET /audit to e: entries newest first, ?queue= to filter, ?limit=
// (1..500, default 100) and ?cursor= from the previous page's next_cursor.
func (r *Recorder) Mount(e *gin.Engine) {
	e.GET("/audit", r.list)
}

func (r *Recorder) list(c *gin.Context) {
	limit, before := 100, int64(0)
	bad := func(msg string) {
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": gin.H{"code": "invalid_request", "message": msg}})
	}
	if v, ok := c.GetQuery("limit"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			bad("limit must be an integer from 1 to 500")
			return
		}
		limit = n
	}
	if v, ok := c.GetQuery("cursor"); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			bad("cursor must be the next_cursor of a previous page")
			return
		}
		before = n
	}
	queue := c.Query("queue")
	if len(queue) > 200 {
		bad("queue must be at most 200 characters")
		return
	}
	entries, next, err := r.store.ListAudit(c, queue, before, limit)
	if err != nil {
		r.log.Error("list audit log", "err", err)
		c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": gin.H{"code": "internal", "message": "could not read the audit log"}})
		return
	}
	if entries == nil {
		entries = []storage.AuditEntry{}
	}
	out := gin.H{"entries": entries, "next_cursor": nil}
	if next > 0 {
		out["next_cursor"] = strconv.FormatInt(next, 10)
	}
	c.JSON(http.StatusOK, out)
}
