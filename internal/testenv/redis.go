package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/localpg"
)

// RedisServer is a redis-server process dedicated to one test, for tests that
// FLUSHALL, kill or restart Redis. It keeps nothing on disk. Its methods are
// safe for concurrent use.
type RedisServer struct {
	// Addr is the server's host:port on 127.0.0.1; it stays the same across
	// Restart.
	Addr string

	bin   string
	dir   string // holds the log (and a cluster node's nodes.conf)
	port  int
	extra []string // more redis-server arguments

	mu      sync.Mutex
	pid     int // 0 when not running
	stopped bool
}

// errNoRedis is returned when redis-server is not on PATH.
var errNoRedis = errors.New("redis-server not found on PATH: install the Debian package `redis-server`")

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
func (r *RedisServer) Kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kill()
}

// Restart starts the server again on the same port, with empty data; a
// running server is killed first. It calls t.Fatal if the server does not
// come up.
func (r *RedisServer) Restart(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		t.Fatalf("testenv: restart redis-server on %s: it was stopped at the end of its test", r.Addr)
	}
	r.kill()
	var err error
	// The port may take a moment to be free again; retry a while.
	for attempt := 0; attempt < 50; attempt++ {
		var ee *redisExitError
		if err = r.launch(); err == nil || !errors.As(err, &ee) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("testenv: restart redis-server on %s: %v", r.Addr, err)
	}
}

// startRedis starts a redis-server on a free port, with extra arguments.
func startRedis(extra ...string) (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoRedis
	}
	dir, err := os.MkdirTemp("", "tftest-redis-")
	if err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	r := &RedisServer{bin: bin, dir: dir, extra: extra}
	for attempt := 1; ; attempt++ {
		if r.port, err = freePort(); err != nil {
			break
		}
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
		err = r.launch()
		var ee *redisExitError
		// Another process may have taken the port we picked; pick again.
		if err == nil || !errors.As(err, &ee) || attempt == 5 {
			break
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	return r, nil
}

// redisExitError reports that redis-server exited before answering PING.
type redisExitError struct{ log string }

func (e *redisExitError) Error() string {
	return "redis-server exited before answering PING; its log ends with:\n" + e.log
}

// launch starts redis-server on r.port and waits until it answers PING. The
// caller holds r.mu or has not published r yet.
func (r *RedisServer) launch() error {
	logPath := filepath.Join(r.dir, "redis.log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(r.bin, append([]string{
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", r.dir,
		"--daemonize", "no",
		"--logfile", "",
	}, r.extra...)...)
	cmd.Dir = r.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group (a Ctrl-C of go test is not ours to forward), and
	// die with the test process even if it dies before cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	r.pid = cmd.Process.Pid
	_ = cmd.Process.Release() // reaped with wait4 below; no goroutine waits

	deadline := time.Now().Add(20 * time.Second)
	for {
		if localpg.ReapNoHang(r.pid) {
			r.pid = 0
			b, _ := os.ReadFile(logPath)
			if len(b) > 4096 {
				b = b[len(b)-4096:]
			}
			return &redisExitError{log: string(b)}
		}
		if pingRedis(r.Addr, 500*time.Millisecond) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			r.kill()
			return fmt.Errorf("redis-server on %s did not answer PING within 20s", r.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill SIGKILLs and reaps the server. The caller holds r.mu.
func (r *RedisServer) kill() {
	if r.pid == 0 {
		return
	}
	_ = syscall.Kill(r.pid, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for !localpg.ReapNoHang(r.pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.pid = 0
}

// stop kills the server for good and removes its directory.
func (r *RedisServer) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kill()
	r.stopped = true
	_ = os.RemoveAll(r.dir)
}
