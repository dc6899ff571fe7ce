package auth

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// Error codes auth adds to the HTTP contract.
const (
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden"
	CodeRateLimited  = "rate_limited"
	codeUnavailable  = "unavailable"
)

// principalKey is the gin context key of the request's *Principal.
const principalKey = "taskforge.auth.principal"

// SessionCookie names the dashboard session cookie.
const SessionCookie = "taskforge_session"

// pollBodyLimit is how much of a poll body the middleware reads to find its queues
// (the API's own limit for worker bodies).
const pollBodyLimit = 64 << 10

// unauthorizedMessage is the one answer to every bad credential, so a caller cannot
// tell unknown, expired and revoked tokens apart.
const unauthorizedMessage = "a valid API token is required: send Authorization: Bearer tf_…"

// FromContext returns the principal the request was authenticated as, or nil when
// authentication is off or the route is public.
func FromContext(c *gin.Context) *Principal {
	if v, ok := c.Get(principalKey); ok {
		return v.(*Principal)
	}
	return nil
}

// QueueAllowed reports whether the request's caller may see queue: always, unless
// it holds a queue-restricted token that does not list it.
func QueueAllowed(c *gin.Context, queue string) bool { return FromContext(c).AllowsQueue(queue) }

func fail(c *gin.Context, status int, code, message string) {
	c.AbortWithStatusJSON(status, gin.H{"error": gin.H{"code": code, "message": message}})
}

// pollBody is the part of a poll request the middleware needs.
type pollBody struct {
	WorkerID string   `json:"worker_id"`
	Queues   []string `json:"queues"`
	WaitMs   *int     `json:"wait_ms"`
}

// peekPoll reads a poll body without consuming it for the handler. ok is false when
// it is not one JSON object that fits the limit: the handler will reject it.
func peekPoll(c *gin.Context) (pollBody, bool) {
	var body pollBody
	if c.Request.Body == nil {
		return body, false
	}
	buf, err := io.ReadAll(io.LimitReader(c.Request.Body, pollBodyLimit+1))
	c.Request.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), c.Request.Body), c.Request.Body}
	if err != nil || len(buf) > pollBodyLimit {
		return body, false
	}
	if json.Unmarshal(buf, &body) != nil {
		return body, false
	}
	return body, true
}

// Middleware authenticates and authorizes each request by its route (gin's
// FullPath and method, see the roles table in the package doc), applies the
// per-token rate limit and the per-worker long-poll bound, and records the
// principal for handlers (FromContext).
func (g *Guard) Middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		route := c.FullPath()
		if route == "" { // no such route: 404 or 405, which reveal nothing
			c.Next()
			return
		}
		rule, _ := RuleFor(c.Request.Method, route)
		var poll pollBody
		var pollOK bool
		if rule.PollBody {
			poll, pollOK = peekPoll(c)
		}
		if rule.Role != Public && !g.authorize(c, rule, poll, pollOK) {
			return
		}
		if pollOK && poll.WaitMs != nil && *poll.WaitMs > 0 && poll.WorkerID != "" {
			if !g.polls.acquire(poll.WorkerID) {
				c.Header("Retry-After", "1")
				fail(c, http.StatusTooManyRequests, CodeRateLimited,
					"too many concurrent long polls for this worker_id on this server; use one poll per worker id at a time")
				return
			}
			defer g.polls.release(poll.WorkerID)
		}
		c.Next()
	}
}

// authorize authenticates the request and checks it may call a route with rule; it
// writes the error and returns false when not.
func (g *Guard) authorize(c *gin.Context, rule Rule, poll pollBody, pollOK bool) bool {
	var hash [32]byte
	var session, present, wellFormed bool
	if h := c.GetHeader("Authorization"); h != "" {
		present = true
		scheme, tok, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") {
			hash, wellFormed = parseSecret(TokenPrefix, strings.TrimSpace(tok))
		}
	} else if ck, err := c.Cookie(SessionCookie); err == nil && ck != "" {
		present, session = true, true
		hash, wellFormed = parseSecret(sessionPrefix, ck)
	}
	var p *Principal
	enabled := true
	if wellFormed {
		var err error
		if p, enabled, err = g.lookup(c, hash, session); err != nil {
			g.log.Error("could not load API tokens; refusing the request", "err", err)
			fail(c, http.StatusServiceUnavailable, codeUnavailable, "cannot check credentials now; retry later")
			return false
		}
	} else {
		s, err := g.current(c)
		if err != nil {
			g.log.Error("could not load API tokens; refusing the request", "err", err)
			fail(c, http.StatusServiceUnavailable, codeUnavailable, "cannot check credentials now; retry later")
			return false
		}
		enabled = s.enabled
	}
	if !enabled {
		return true // no token exists: the API is open
	}
	if p == nil || p.expired(g.now()) {
		if rule.Page && (!present || session) {
			c.Redirect(http.StatusSeeOther, "/admin/login")
			c.Abort()
			return false
		}
		c.Header("WWW-Authenticate", `Bearer realm="taskforge"`)
		fail(c, http.StatusUnauthorized, CodeUnauthorized, unauthorizedMessage)
		return false
	}
	rate, burst := g.cfg.RateLimit, g.cfg.RateBurst
	if p.RateLimit != nil {
		rate, burst = *p.RateLimit, max(1, 2**p.RateLimit)
	}
	if rate > 0 {
		if ok, wait := g.rate.take(p.TokenID, g.now(), rate, burst); !ok {
			c.Header("Retry-After", strconv.Itoa(int(math.Ceil(max(wait, time.Millisecond).Seconds()))))
			fail(c, http.StatusTooManyRequests, CodeRateLimited, "this token's request rate limit is exceeded; retry after the Retry-After seconds")
			return false
		}
	}
	if !allows(p.Role, rule.Role) {
		fail(c, http.StatusForbidden, CodeForbidden, "this token's role ("+string(p.Role)+") may not call this route; it needs "+string(rule.Role))
		return false
	}
	if rule.Queue && !p.AllowsQueue(c.Param("name")) {
		fail(c, http.StatusForbidden, CodeForbidden, "this token may not use this queue")
		return false
	}
	if rule.PollBody && p.Queues != nil && pollOK {
		for _, q := range poll.Queues {
			if !p.AllowsQueue(q) {
				fail(c, http.StatusForbidden, CodeForbidden, "this token may not poll queue "+strconv.Quote(q))
				return false
			}
		}
	}
	c.Set(principalKey, p)
	return true
}
