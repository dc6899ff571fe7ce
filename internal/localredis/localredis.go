package localredis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskforge/taskforge/internal/localpg"
)

// ErrNoBinary is returned by Start when redis-server is not on PATH.
var ErrNoBinary = errors.New("redis-server not found on PATH: install the Debian package `redis-server`")

// Server is one redis-server process started by Start. It keeps nothing on disk
// but its log. Its methods are safe for concurrent use.
type Server struct {
	// Addr is the server's host:port on 127.0.0.1; it stays the same across
	// Restart.
	Addr string

	bin  string
	dir  string // holds the log (and a cluster node's nodes.conf)
	port int
	args []string // more redis-server arguments

	mu      sync.Mutex
	pid     int // 0 when not running
	stopped bool
}

// Start starts a redis-server with no persistence on a free port of 127.0.0.1,
// with args appended to its command line (e.g. "--cluster-enabled", "yes"), and
// returns once it answers PING. When another process takes the port first it
// picks another. ctx bounds the start.
func Start(ctx context.Context, args ...string) (_ *Server, err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoBinary
	}
	dir, err := os.MkdirTemp("", "taskforge-redis-")
	if err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &Server{bin: bin, dir: dir, args: args}
	for attempt := 1; ; attempt++ {
		if s.port, err = FreePort(); err != nil {
			break
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		err = s.launch(ctx)
		var ee *exitError
		// Another process may have taken the port we picked; pick again.
		if err == nil || !errors.As(err, &ee) || attempt == 5 || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	return s, nil
}

// URL returns the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Kill SIGKILLs the server and waits for it to die. Killing a server that is
// not running does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

// Restart starts the server again on the same port, with empty data; a running
// server is killed first. While the port is not yet free again it retries, until
// ctx ends.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return fmt.Errorf("restart redis-server on %s: it was stopped", s.Addr)
	}
	s.kill()
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for {
		err := s.launch(ctx)
		var ee *exitError
		if err == nil || !errors.As(err, &ee) {
			if err != nil {
				return fmt.Errorf("restart redis-server on %s: %w", s.Addr, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restart redis-server on %s: %w (last try: %w)", s.Addr, ctx.Err(), err)
		case <-retry.C: // the port may take a moment to be free again
		}
	}
}

// Stop kills the server for good and removes its directory. Stopping twice does
// nothing more.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
	s.stopped = true
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("remove redis-server directory: %w", err)
	}
	return nil
}

// exitError reports that redis-server exited before answering PING.
type exitError struct{ log string }

func (e *exitError) Error() string {
	return "redis-server exited before answering PING; its log ends with:\n" + e.log
}

// launch starts redis-server on s.port and waits until it answers PING, for at
// most 20 s or until ctx ends. The caller holds s.mu or has not published s yet.
func (s *Server) launch(ctx context.Context) error {
	logPath := filepath.Join(s.dir, "redis.log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(s.bin, append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "",
	}, s.args...)...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group (a Ctrl-C of the caller is not ours to forward), and
	// die with the calling process even if it dies before Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.pid = cmd.Process.Pid
	_ = cmd.Process.Release() // reaped with wait4 below; no goroutine waits

	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		if localpg.ReapNoHang(s.pid) {
			s.pid = 0
			b, _ := os.ReadFile(logPath)
			if len(b) > 4096 {
				b = b[len(b)-4096:]
			}
			return &exitError{log: string(b)}
		}
		if Ping(s.Addr, 500*time.Millisecond) == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			s.kill()
			return fmt.Errorf("redis-server on %s did not answer PING: %w", s.Addr, ctx.Err())
		case <-poll.C: // a process starting sends nothing: ask again
		}
	}
}

// kill SIGKILLs and reaps the server. The caller holds s.mu.
func (s *Server) kill() {
	if s.pid == 0 {
		return
	}
	_ = syscall.Kill(s.pid, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for !localpg.ReapNoHang(s.pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // a dying child sends nothing but SIGCHLD, which Go does not expose
	}
	s.pid = 0
}

// Ping reports whether the Redis at addr answers PING within timeout. It speaks
// RESP over a plain connection: a client library would log every refused dial
// while a server starts or after it was killed.
func Ping(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
