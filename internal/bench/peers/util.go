package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// pace calls send n times at rate per second, on a schedule that does not drift.
func pace(ctx context.Context, n int, rate float64, send func() error) error {
	t0 := time.Now()
	every := time.Duration(float64(time.Second) / rate)
	for i := 0; i < n; i++ {
		if d := time.Until(t0.Add(time.Duration(i) * every)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := send(); err != nil {
			return err
		}
	}
	return nil
}

// timeEach calls f n times one after another and returns each call's duration.
func timeEach(n int, f func() error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// wait waits until every task arrived.
func (l *latencies) wait(ctx context.Context) ([]time.Duration, error) {
	select {
	case <-l.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("%d of %d tasks arrived", len(l.got), l.n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.got...), nil
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// quietAsynqLogger drops Asynq's logs.
type quietAsynqLogger struct{}

func (quietAsynqLogger) Debug(...any) {}
func (quietAsynqLogger) Info(...any)  {}
func (quietAsynqLogger) Warn(...any)  {}
func (quietAsynqLogger) Error(...any) {}
func (quietAsynqLogger) Fatal(...any) {}
