package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
)

// Limits of a token request.
const (
	maxTokenName   = 200
	maxTokenQueues = 100
	maxTokenTTL    = 10 * 365 * 24 * time.Hour
	tokenBodyLimit = 16 << 10
)

// queueName is the API's queue-name pattern (docs/api.md, Queues).
var queueName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Spec describes a token to create.
type Spec struct {
	Name      string
	Role      Role
	Queues    []string      // nil = every queue; not allowed for admins
	TTL       time.Duration // 0 = never expires
	RateLimit *float64      // nil = the server default
}

// Validate reports the first field that cannot work.
func (s Spec) Validate() error {
	switch {
	case !ValidRole(string(s.Role)):
		return fmt.Errorf("role %q: want producer, worker or admin", s.Role)
	case len(s.Name) > maxTokenName:
		return fmt.Errorf("name is longer than %d bytes", maxTokenName)
	case s.Queues != nil && s.Role == RoleAdmin:
		return errors.New("admin tokens cannot be restricted to queues (an admin can create tokens)")
	case s.Queues != nil && (len(s.Queues) == 0 || len(s.Queues) > maxTokenQueues):
		return fmt.Errorf("queues: give 1 to %d queue names, or none for every queue", maxTokenQueues)
	case s.TTL < 0 || s.TTL > maxTokenTTL:
		return errors.New("expiry must be positive and at most 10 years")
	case s.RateLimit != nil && !(*s.RateLimit > 0 && *s.RateLimit <= 1e6):
		return errors.New("rate_limit must be above 0 and at most 1000000 requests per second")
	}
	for _, q := range s.Queues {
		if !queueName.MatchString(q) {
			return fmt.Errorf("queue name %q is not valid", q)
		}
	}
	return nil
}

// Create stores a new token and returns its secret (to show once) and its record.
// It is what both POST /tokens and `taskforge token create --database-url` use.
func Create(ctx context.Context, store *storage.Store, s Spec) (string, storage.Token, error) {
	if err := s.Validate(); err != nil {
		return "", storage.Token{}, err
	}
	secret, hash := newSecret(TokenPrefix)
	t, err := store.CreateToken(ctx, storage.NewToken{Name: s.Name, Role: string(s.Role), Queues: s.Queues,
		RateLimit: s.RateLimit, Hash: hash[:], TTL: s.TTL})
	if err != nil {
		return "", storage.Token{}, err
	}
	return secret, t, nil
}

// CreatedToken is the answer of POST /tokens: the token's record and, this once,
// its secret.
type CreatedToken struct {
	storage.Token
	Secret string `json:"token"`
}

type createTokenRequest struct {
	Name             string   `json:"name"`
	Role             string   `json:"role"`
	Queues           []string `json:"queues"`
	ExpiresInSeconds *int64   `json:"expires_in_seconds"`
	RateLimit        *float64 `json:"rate_limit"`
}

func invalid(c *gin.Context, msg string) {
	fail(c, http.StatusBadRequest, "invalid_request", msg)
}

func (g *Guard) serverError(c *gin.Context, what string, err error) {
	g.log.Error(what, "err", err)
	fail(c, http.StatusInternalServerError, "internal", "internal error")
}

// decodeStrict reads one JSON object of at most limit bytes into dst, refusing
// unknown fields and trailing data, as the API does.
func decodeStrict(c *gin.Context, limit int64, dst any) error {
	if ct := c.ContentType(); ct != "" && ct != "application/json" {
		return errors.New("Content-Type must be application/json")
	}
	dec := json.NewDecoder(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("invalid request body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("request body must hold exactly one JSON value")
	}
	return nil
}

func (g *Guard) createToken(c *gin.Context) {
	var req createTokenRequest
	if err := decodeStrict(c, tokenBodyLimit, &req); err != nil {
		invalid(c, err.Error())
		return
	}
	spec := Spec{Name: req.Name, Role: Role(req.Role), Queues: req.Queues, RateLimit: req.RateLimit}
	if req.ExpiresInSeconds != nil {
		if *req.ExpiresInSeconds < 1 || *req.ExpiresInSeconds > int64(maxTokenTTL/time.Second) {
			invalid(c, "expires_in_seconds must be 1 to 315360000 (10 years)")
			return
		}
		spec.TTL = time.Duration(*req.ExpiresInSeconds) * time.Second
	}
	if err := spec.Validate(); err != nil {
		invalid(c, err.Error())
		return
	}
	secret, t, err := Create(c, g.store, spec)
	if err != nil {
		g.serverError(c, "create token", err)
		return
	}
	g.invalidate()
	c.JSON(http.StatusCreated, CreatedToken{Token: t, Secret: secret})
}

func (g *Guard) listTokens(c *gin.Context) {
	ts, err := g.store.ListTokens(c)
	if err != nil {
		g.serverError(c, "list tokens", err)
		return
	}
	if ts == nil {
		ts = []storage.Token{}
	}
	c.JSON(http.StatusOK, gin.H{"tokens": ts})
}

func (g *Guard) revokeToken(c *gin.Context) {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		fail(c, http.StatusNotFound, "token_not_found", "token not found")
		return
	}
	_, err = g.store.RevokeToken(c, id, true)
	switch {
	case errors.Is(err, storage.ErrTokenNotFound):
		fail(c, http.StatusNotFound, "token_not_found", "token not found")
		return
	case errors.Is(err, storage.ErrLastAdminToken):
		fail(c, http.StatusConflict, "last_admin_token", "refusing to revoke the last working admin token: create another admin token first, "+
			"or revoke it with `taskforge token revoke --database-url`")
		return
	case err != nil:
		g.serverError(c, "revoke token", err)
		return
	}
	g.invalidate()
	c.Status(http.StatusNoContent)
}

// Mount adds the token routes (POST/GET /tokens, DELETE /tokens/:id) and the
// dashboard's sign-in routes to e. The middleware guards them like every route.
func (g *Guard) Mount(e *gin.Engine) {
	e.POST("/tokens", g.createToken)
	e.GET("/tokens", g.listTokens)
	e.DELETE("/tokens/:id", g.revokeToken)
	g.mountSession(e)
}
