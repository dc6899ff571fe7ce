package storage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The statements of this file are the session-level ones, which run on a
// connection of their own rather than the pool's; sql/ holds every statement.

// DueListener is a session of its own that LISTENs on DueChannel: enqueues, and
// statements that make tasks due, NOTIFY the queue that has new work.
type DueListener struct {
	conn *pgx.Conn
}

// ListenDue opens a session with a copy of cfg (nil: configured like the store's
// pool, which must then reach PostgreSQL directly: a transaction pooler does not
// deliver notifications to a session) and LISTENs on DueChannel in it.
func (s *Store) ListenDue(ctx context.Context, cfg *pgx.ConnConfig) (*DueListener, error) {
	if cfg == nil {
		cfg = s.pool.Config().ConnConfig
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if _, err := conn.Exec(ctx, listenDue); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("listen: %w", err)
	}
	return &DueListener{conn: conn}, nil
}

// Next waits for the next announcement and returns the queue it names; "" means
// any queue may have new work.
func (l *DueListener) Next(ctx context.Context) (string, error) {
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		return "", fmt.Errorf("wait for notification: %w", err)
	}
	return n.Payload, nil
}

// Close ends the session.
func (l *DueListener) Close(ctx context.Context) error { return l.conn.Close(ctx) }

// CreateDatabase creates database name on the server adminURL reaches (as a role
// allowed to), unless it exists. It runs outside any Store, before the database it
// creates can have one: `taskforge dev` makes its database on the embedded server.
func CreateDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, selectDatabaseExists, name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	// CREATE DATABASE takes no parameters: PostgreSQL writes it, the name quoted.
	var create string
	if err := conn.QueryRow(ctx, createDatabaseStatement, name).Scan(&create); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, create); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}
