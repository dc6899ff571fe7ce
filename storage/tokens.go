package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Token sentinels.
var (
	ErrTokenNotFound   = errors.New("token not found")
	ErrLastAdminToken  = errors.New("refusing to revoke the last working admin token")
	ErrSessionNotSaved = errors.New("token revoked or unknown; session not created")
)

// Token is an API token as stored, without its secret (only its hash is kept).
type Token struct {
	ID        uuid.UUID  `db:"id" json:"id"`
	Name      string     `db:"name" json:"name"`
	Role      string     `db:"role" json:"role"`
	Queues    []string   `db:"queues" json:"queues"` // nil = every queue
	RateLimit *float64   `db:"rate_limit" json:"rate_limit"`
	CreatedAt time.Time  `db:"created_at" json:"created_at"`
	ExpiresAt *time.Time `db:"expires_at" json:"expires_at"`
	RevokedAt *time.Time `db:"revoked_at" json:"revoked_at"`
}

// HashedToken is a Token with the SHA-256 hash of its secret.
type HashedToken struct {
	Token
	Hash []byte `db:"hash"`
}

// Session is a live dashboard session: the hash of its cookie secret, its token and
// when it ends.
type Session struct {
	Hash      []byte    `db:"hash"`
	TokenID   uuid.UUID `db:"token_id"`
	ExpiresAt time.Time `db:"expires_at"`
}

// NewToken is a token to create; Hash is the SHA-256 of its secret.
type NewToken struct {
	Name      string
	Role      string
	Queues    []string // nil = every queue
	RateLimit *float64
	Hash      []byte
	TTL       time.Duration // 0 = never expires
}

// CreateToken stores t and returns it.
func (s *Store) CreateToken(ctx context.Context, t NewToken) (Token, error) {
	var ttl *int64
	if t.TTL > 0 {
		v := ms(t.TTL)
		ttl = &v
	}
	rows, err := s.pool.Query(ctx, insertToken, t.Name, t.Role, t.Queues, t.RateLimit, t.Hash, ttl)
	out, err := one[Token](rows, err, ErrTokenNotFound)
	if err != nil {
		return Token{}, fmt.Errorf("create token: %w", err)
	}
	return out, nil
}

// ListTokens returns every token, revoked ones included, oldest first.
func (s *Store) ListTokens(ctx context.Context) ([]Token, error) {
	rows, err := s.pool.Query(ctx, listTokens)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Token])
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken revokes token id (revoking a revoked token changes nothing) and returns
// it. With keepAdmin, it refuses with ErrLastAdminToken to revoke the last admin
// token that still works, so that an HTTP caller cannot lock every admin out or,
// by revoking every token, switch authentication off.
func (s *Store) RevokeToken(ctx context.Context, id uuid.UUID, keepAdmin bool) (Token, error) {
	var out Token
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if keepAdmin {
			rows, err := tx.Query(ctx, lockActiveAdmins)
			if err != nil {
				return err
			}
			admins, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil {
				return err
			}
			if len(admins) == 1 && slices.Contains(admins, id) {
				return ErrLastAdminToken
			}
		}
		rows, err := tx.Query(ctx, revokeToken, id)
		out, err = one[Token](rows, err, ErrTokenNotFound)
		return err
	})
	if err != nil {
		return Token{}, fmt.Errorf("revoke token %s: %w", id, err)
	}
	return out, nil
}

// AuthSnapshot returns every unrevoked token with its hash and every live dashboard
// session: what a replica caches to authenticate requests.
func (s *Store) AuthSnapshot(ctx context.Context) ([]HashedToken, []Session, error) {
	rows, err := s.pool.Query(ctx, tokenSnapshot)
	if err != nil {
		return nil, nil, fmt.Errorf("load tokens: %w", err)
	}
	tokens, err := pgx.CollectRows(rows, pgx.RowToStructByName[HashedToken])
	if err != nil {
		return nil, nil, fmt.Errorf("load tokens: %w", err)
	}
	rows, err = s.pool.Query(ctx, sessionSnapshot)
	if err != nil {
		return nil, nil, fmt.Errorf("load sessions: %w", err)
	}
	sessions, err := pgx.CollectRows(rows, pgx.RowToStructByName[Session])
	if err != nil {
		return nil, nil, fmt.Errorf("load sessions: %w", err)
	}
	return tokens, sessions, nil
}

// CreateSession records a dashboard session of token tokenID whose cookie secret
// hashes to hash, lasting ttl or until the token expires, and returns its end. It
// returns ErrSessionNotSaved when the token is unknown or revoked.
func (s *Store) CreateSession(ctx context.Context, tokenID uuid.UUID, hash []byte, ttl time.Duration) (time.Time, error) {
	var until time.Time
	err := s.pool.QueryRow(ctx, insertSession, tokenID, hash, ms(ttl)).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, ErrSessionNotSaved
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("create session: %w", err)
	}
	return until, nil
}

// DeleteSession ends the session whose cookie secret hashes to hash.
func (s *Store) DeleteSession(ctx context.Context, hash []byte) error {
	if _, err := s.pool.Exec(ctx, deleteSession, hash); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}
