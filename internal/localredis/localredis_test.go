package localredis

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestLifecycle starts a server with extra arguments, kills it, restarts it on
// the same address and stops it for good, checking with PING at each step.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s, err := Start(ctx, "--databases", "2")
	if err != nil {
		t.Fatal(err)
	}
	if err := Ping(s.Addr, time.Second); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
	if s.URL() != "redis://"+s.Addr {
		t.Errorf("URL() = %q", s.URL())
	}
	s.Kill()
	if Ping(s.Addr, 200*time.Millisecond) == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Kill() // not running: nothing to do
	addr := s.Addr
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Addr != addr {
		t.Errorf("Restart moved the server from %s to %s", addr, s.Addr)
	}
	if err := Ping(s.Addr, time.Second); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	dir := s.dir
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if Ping(addr, 200*time.Millisecond) == nil {
		t.Error("PING answered after Stop")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s left after Stop: %v", dir, err)
	}
	if err := s.Restart(ctx); err == nil {
		t.Error("Restart after Stop succeeded")
	}
}

// TestStartFailures: a bad argument is reported with redis-server's log, and a
// missing binary with ErrNoBinary.
func TestStartFailures(t *testing.T) {
	ctx := testCtx(t)
	if _, err := Start(ctx, "--no-such-option", "x"); err == nil {
		t.Error("Start with an unknown option succeeded")
	} else if ee := (*exitError)(nil); !errors.As(err, &ee) {
		t.Errorf("Start with an unknown option: %v, want the server's exit with its log", err)
	}
	t.Setenv("PATH", filepath.Join(t.TempDir(), "empty"))
	if _, err := Start(ctx); !errors.Is(err, ErrNoBinary) {
		t.Errorf("Start without redis-server on PATH: %v, want ErrNoBinary", err)
	}
}
