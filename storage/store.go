package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DueChannel is the LISTEN/NOTIFY channel on which enqueues announce due work; the
// payload is the queue name.
const DueChannel = "taskforge_due"

// StatsWindow is the window over which Stats computes throughput and error rate.
const StatsWindow = time.Minute

// Store runs TaskForge's queries against a PostgreSQL pool.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store on pool. The pool should be opened with Connect (or have
// ConfigureConn applied) so that times come back in UTC.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Pool returns the underlying pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Connect opens a pool on url with TaskForge's connection settings.
func Connect(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		ConfigureConn(conn)
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}

// ConfigureConn makes conn scan timestamps in UTC, so API times are RFC 3339 UTC.
func ConfigureConn(conn *pgx.Conn) {
	conn.TypeMap().RegisterType(&pgtype.Type{
		Name: "timestamptz", OID: pgtype.TimestamptzOID,
		Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC},
	})
}

// Ping checks that PostgreSQL answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}

func collectTasks(rows pgx.Rows) ([]Task, error) {
	return pgx.CollectRows(rows, pgx.RowToStructByName[Task])
}

// one returns the only row of rows, or notFound when there is none.
func one[T any](rows pgx.Rows, err error, notFound error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	v, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[T])
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, notFound
	}
	return v, err
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// optional returns nil for the zero value, so it binds as SQL NULL.
func optional[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// cursorArgs splits a cursor into its two nullable query arguments.
func cursorArgs(c *Cursor) (*time.Time, *uuid.UUID) {
	if c == nil {
		return nil, nil
	}
	return &c.Time, &c.ID
}
