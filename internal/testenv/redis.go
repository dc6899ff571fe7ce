package testenv

import (
	"context"
	"testing"

	"github.com/taskforge/taskforge/internal/localredis"
)

// RedisServer is a redis-server process dedicated to one test, for tests that
// FLUSHALL, kill or restart Redis. It keeps nothing on disk. Its methods are
// safe for concurrent use.
type RedisServer struct {
	// Addr is the server's host:port on 127.0.0.1; it stays the same across
	// Restart.
	Addr string

	srv *localredis.Server
}

// StartRedisServer starts a redis-server on a free port of 127.0.0.1, with
// no persistence, dedicated to the test; t.Cleanup kills it.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	r, err := startRedis()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(r.stop)
	return r
}

// Flush empties the server (FLUSHALL).
func (r *RedisServer) Flush(t testing.TB) {
	t.Helper()
	c := newRedisClient(r.Addr, opTimeout)
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("testenv: FLUSHALL on %s: %v", r.Addr, err)
	}
}

// Kill SIGKILLs the server and waits for it to die. Killing a server that is
// not running does nothing.
func (r *RedisServer) Kill() { r.srv.Kill() }

// Restart starts the server again on the same port, with empty data; a
// running server is killed first. It calls t.Fatal if the server does not
// come up.
func (r *RedisServer) Restart(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := r.srv.Restart(ctx); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// startRedis starts a redis-server on a free port, with extra arguments.
func startRedis(extra ...string) (*RedisServer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	srv, err := localredis.Start(ctx, extra...)
	if err != nil {
		return nil, err
	}
	return &RedisServer{Addr: srv.Addr, srv: srv}, nil
}

// stop kills the server for good and removes its directory.
func (r *RedisServer) stop() { _ = r.srv.Stop() }
