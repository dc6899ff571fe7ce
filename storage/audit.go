package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// AuditEntry is one operator action as the audit log records it.
type AuditEntry struct {
	ID         int64           `json:"id" db:"id"`
	At         time.Time       `json:"at" db:"at"`
	Actor      string          `json:"actor" db:"actor"`
	TokenID    *uuid.UUID      `json:"token_id" db:"token_id"`
	Via        string          `json:"via" db:"via"` // token, session or open
	RemoteAddr string          `json:"remote_addr" db:"remote_addr"`
	Method     string          `json:"method" db:"method"`
	Route      string          `json:"route" db:"route"`
	Queue      *string         `json:"queue" db:"queue"`
	Target     *string         `json:"target" db:"target"`
	Status     int             `json:"status" db:"status"`
	Request    json.RawMessage `json:"request" db:"request"`
}

// InsertAudit records e (its ID and At are set by the database).
func (s *Store) InsertAudit(ctx context.Context, e AuditEntry) error {
	var request any
	if len(e.Request) > 0 {
		request = string(e.Request)
	}
	_, err := s.pool.Exec(ctx, insertAudit, e.Actor, e.TokenID, e.Via, e.RemoteAddr, e.Method, e.Route,
		e.Queue, e.Target, e.Status, request)
	if err != nil {
		return fmt.Errorf("record audit entry %s %s: %w", e.Method, e.Route, err)
	}
	return nil
}

// ListAudit returns up to limit entries newest first, of queue when it is not
// empty, older than the entry with id before when before > 0, and the id to pass
// as before for the next page (0 when there is none).
func (s *Store) ListAudit(ctx context.Context, queue string, before int64, limit int) ([]AuditEntry, int64, error) {
	var q *string
	if queue != "" {
		q = &queue
	}
	rows, err := s.pool.Query(ctx, listAudit, q, before, limit+1)
	if err != nil {
		return nil, 0, fmt.Errorf("list audit log: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[AuditEntry])
	if err != nil {
		return nil, 0, fmt.Errorf("list audit log: %w", err)
	}
	var next int64
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}

// DeleteExpiredAudit deletes up to limit audit entries older than olderThan on the
// database clock, oldest first, and returns how many it deleted. The transaction
// is bounded by timeout.
func (s *Store) DeleteExpiredAudit(ctx context.Context, olderThan time.Duration, limit int, timeout time.Duration) (int64, error) {
	n, err := s.shortDelete(ctx, timeout, deleteExpiredAudit, ms(olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired audit entries: %w", err)
	}
	return n, nil
}
