package client

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Token is an API token as the server lists it (never with its secret).
type Token struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	Queues    []string   `json:"queues"` // nil = every queue
	RateLimit *float64   `json:"rate_limit"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// CreatedToken is a new token with its secret, which the server shows only once.
type CreatedToken struct {
	Token
	Secret string `json:"token"`
}

// TokenSpec describes a token to create.
type TokenSpec struct {
	Name      string        `json:"name,omitempty"`
	Role      string        `json:"role"`             // producer, worker or admin
	Queues    []string      `json:"queues,omitempty"` // empty = every queue
	ExpiresIn time.Duration `json:"-"`                // 0 = never
	RateLimit *float64      `json:"rate_limit,omitempty"`
}

// CreateToken creates an API token (POST /tokens; needs an admin token).
func (c *Client) CreateToken(ctx context.Context, spec TokenSpec) (*CreatedToken, error) {
	body := struct {
		TokenSpec
		ExpiresInSeconds *int64 `json:"expires_in_seconds,omitempty"`
	}{TokenSpec: spec}
	if spec.ExpiresIn > 0 {
		secs := int64((spec.ExpiresIn + time.Second - 1) / time.Second)
		body.ExpiresInSeconds = &secs
	}
	var out CreatedToken
	if _, _, err := c.do(ctx, http.MethodPost, "/tokens", nil, body, &out); err != nil {
		return nil, fmt.Errorf("create token: %w", err)
	}
	return &out, nil
}

// ListTokens lists every token, revoked ones included (GET /tokens; admin).
func (c *Client) ListTokens(ctx context.Context) ([]Token, error) {
	var out struct {
		Tokens []Token `json:"tokens"`
	}
	if _, _, err := c.do(ctx, http.MethodGet, "/tokens", nil, nil, &out); err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out.Tokens, nil
}

// RevokeToken revokes token id (DELETE /tokens/:id; admin). The server refuses to
// revoke its last working admin token.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	if _, _, err := c.do(ctx, http.MethodDelete, "/tokens/"+esc(id), nil, nil, nil); err != nil {
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	return nil
}
