package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// benchArgs is the job of every River workload: SentAtNs is the enqueue time
// (latency), SleepMs the work.
type benchArgs struct {
	SentAtNs int64 `json:"sent_at_ns,omitempty"`
	SleepMs  int   `json:"sleep_ms,omitempty"`
}

func (benchArgs) Kind() string { return "bench" }

// riverSys runs River on a database of its own, with its fast settings:
// FetchCooldown and FetchPollInterval 1 ms.
type riverSys struct {
	admin  *pgx.Conn
	dbName string
	pool   *pgxpool.Pool
}

func newRiver(ctx context.Context, serverURL string) (*riverSys, error) {
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	name := fmt.Sprintf("peers_river_%d", os.Getpid())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		return nil, fmt.Errorf("create database: %w", err)
	}
	s := &riverSys{admin: admin, dbName: name}
	cfg, err := pgxpool.ParseConfig(serverURL)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	cfg.ConnConfig.Database = name
	cfg.MaxConns = 120
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, s.fail(ctx, err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(s.pool), nil)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, s.fail(ctx, fmt.Errorf("migrate: %w", err))
	}
	return s, nil
}

// fail drops the database, even when ctx ended (an interrupt during the set-up).
func (s *riverSys) fail(ctx context.Context, err error) error {
	_ = s.Close(context.WithoutCancel(ctx))
	return err
}

// Close drops the database.
func (s *riverSys) Close(ctx context.Context) error {
	if s.pool != nil {
		s.pool.Close()
	}
	defer s.admin.Close(ctx)
	if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+s.dbName+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", s.dbName, err)
	}
	return nil
}

func (s *riverSys) client(workers int, work func(context.Context, *river.Job[benchArgs]) error) (*river.Client[pgx.Tx], error) {
	w := river.NewWorkers()
	river.AddWorker(w, river.WorkFunc(work))
	return river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           w,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: time.Millisecond,
		Logger:            quietLogger(),
	})
}

func (s *riverSys) reset(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, "TRUNCATE river_job")
	return err
}

func (s *riverSys) insertMany(ctx context.Context, c *river.Client[pgx.Tx], n int, args benchArgs) error {
	for left := n; left > 0; {
		b := min(left, 1000)
		params := make([]river.InsertManyParams, b)
		for i := range params {
			params[i] = river.InsertManyParams{Args: args}
		}
		if _, err := c.InsertManyFast(ctx, params); err != nil {
			return err
		}
		left -= b
	}
	return nil
}

// Drain counts a task done when River reports it completed (after its
// completer has recorded it), not when its handler returns.
func (s *riverSys) Drain(ctx context.Context, n, workers int, sleep time.Duration) (float64, error) {
	if err := s.reset(ctx); err != nil {
		return 0, err
	}
	sp := newSpan(n)
	c, err := s.client(workers, func(ctx context.Context, j *river.Job[benchArgs]) error {
		sp.start()
		if j.Args.SleepMs > 0 {
			time.Sleep(time.Duration(j.Args.SleepMs) * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := s.insertMany(ctx, c, n, benchArgs{SleepMs: int(sleep.Milliseconds())}); err != nil {
		return 0, err
	}
	events, cancel := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 100, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	go func() {
		for range events {
			sp.end()
		}
	}()
	if err := c.Start(ctx); err != nil {
		return 0, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	return sp.wait(ctx)
}

func (s *riverSys) Preload(ctx context.Context, n int) (float64, error) {
	if err := s.reset(ctx); err != nil {
		return 0, err
	}
	c, err := s.client(1, func(context.Context, *river.Job[benchArgs]) error { return nil })
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := s.insertMany(ctx, c, n, benchArgs{}); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

func (s *riverSys) Latency(ctx context.Context, n, workers int, rate float64) ([]time.Duration, error) {
	if err := s.reset(ctx); err != nil {
		return nil, err
	}
	l := newLatencies(n)
	c, err := s.client(workers, func(_ context.Context, j *river.Job[benchArgs]) error {
		l.received(time.Unix(0, j.Args.SentAtNs))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	if err := pace(ctx, n, rate, func() error {
		_, err := c.Insert(ctx, benchArgs{SentAtNs: time.Now().UnixNano()}, nil)
		return err
	}); err != nil {
		return nil, err
	}
	return l.wait(ctx)
}

func (s *riverSys) RoundTrips(ctx context.Context, n int) ([]time.Duration, error) {
	if err := s.reset(ctx); err != nil {
		return nil, err
	}
	c, err := s.client(1, func(context.Context, *river.Job[benchArgs]) error { return nil })
	if err != nil {
		return nil, err
	}
	return timeEach(n, func() error {
		_, err := c.Insert(ctx, benchArgs{}, nil)
		return err
	})
}
