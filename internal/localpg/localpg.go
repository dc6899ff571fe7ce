package localpg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configure Start.
type Options struct {
	// DataDir is the cluster directory. Empty means a fresh temporary
	// cluster (fsync off) that Stop deletes. Otherwise the directory is kept:
	// if it holds a cluster (a PG_VERSION file) it is reused as is, if it is
	// missing or empty initdb creates one, and anything else is an error.
	// When running as root, DataDir is handed to the user that runs
	// PostgreSQL, and any ancestor directory that user could not search gets
	// the o+x bit.
	DataDir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Log receives the output of initdb and the server log. Nil means a file:
	// postgres.log in the temporary directory for a throwaway cluster, or
	// <DataDir>.log beside DataDir for a kept one (see Server.LogPath). A Log
	// that is not an *os.File is fed by a goroutine while the server runs.
	Log io.Writer
	// Settings are server settings (name → value, as in postgresql.conf) given
	// to the postmaster after Start's own, so they win over them: a throwaway
	// cluster with {"fsync": "on", "full_page_writes": "on"} keeps both on.
	Settings map[string]string
}

// Server is one PostgreSQL server started by Start. Its methods are safe for
// concurrent use.
type Server struct {
	binDir  string
	dataDir string
	runDir  string // private temp dir: socket dir, owner file, temp cluster
	sockDir string
	port    int
	temp    bool
	cred    *syscall.Credential // nil: run as ourselves
	extra   []string            // -c arguments from Options.Settings

	logPath string   // our own log file, "" if the caller gave Log
	logFile *os.File // open while the server object lives; nil if caller's
	userLog io.Writer

	mu       sync.Mutex
	pid      int           // postmaster pid while running, else 0
	copyDone chan struct{} // closed when the log copier ends (pipe mode)
	stopped  bool
}

// Start starts a PostgreSQL server as described by opts and returns once it
// accepts connections on 127.0.0.1 as the trusted superuser `postgres`.
//
// It runs initdb when needed (trust auth, UTF8, C locale; --no-sync for
// throwaway clusters), then the postmaster, with listen_addresses=127.0.0.1,
// unix_socket_directories set to a private directory, and for throwaway
// clusters fsync and full_page_writes off (which risk data only if the
// machine crashes; committed data survives Kill). Waiting is
// bounded by ctx. When the process is root, the programs run as the
// `postgres` user, or `nobody` when there is no such user.
//
// The postmaster is in its own process group and gets a signal when the
// calling process dies (SIGQUIT for a throwaway cluster, SIGINT, a fast
// shutdown, for a kept one), so a crashed caller leaves no server running.
func Start(ctx context.Context, opts Options) (*Server, error) {
	s, err := start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	return s, nil
}

func start(ctx context.Context, opts Options) (_ *Server, err error) {
	binDir, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := runAsCredential()
	if err != nil {
		return nil, err
	}
	sweepStale(runDirBase())
	runDir, err := newRunDir(cred)
	if err != nil {
		return nil, fmt.Errorf("make run directory: %w", err)
	}
	s := &Server{
		binDir:  binDir,
		runDir:  runDir,
		sockDir: filepath.Join(runDir, "sock"),
		port:    opts.Port,
		temp:    opts.DataDir == "",
		cred:    cred,
		userLog: opts.Log,
		extra:   settingArgs(opts.Settings),
	}
	defer func() {
		if err != nil {
			s.mu.Lock()
			s.teardown()
			s.mu.Unlock()
		}
	}()

	if err := os.Mkdir(s.sockDir, 0o700); err != nil {
		return nil, fmt.Errorf("make socket directory: %w", err)
	}
	if err := chownTree(s.sockDir, cred); err != nil {
		return nil, fmt.Errorf("hand socket directory to the postgres user: %w", err)
	}

	needInit, err := s.prepareDataDir(opts.DataDir)
	if err != nil {
		return nil, err
	}
	if !needInit {
		if s.binDir, err = binariesForCluster(binDir, s.dataDir); err != nil {
			return nil, err
		}
	}
	if err := s.openLog(); err != nil {
		return nil, err
	}
	if needInit {
		if err := s.initdb(ctx); err != nil {
			return nil, err
		}
	}

	autoPort := s.port == 0
	for attempt := 1; ; attempt++ {
		if autoPort {
			if s.port, err = freePort(); err != nil {
				return nil, err
			}
		}
		err = s.launch(ctx)
		var ee *exitError
		// Another process may have taken the port we picked; pick again.
		if autoPort && errors.As(err, &ee) && portBusy(s.port) && attempt < 5 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// prepareDataDir sets s.dataDir, creating it if needed, and reports whether
// it needs initdb.
func (s *Server) prepareDataDir(dir string) (needInit bool, err error) {
	if s.temp {
		s.dataDir = filepath.Join(s.runDir, "data")
		if err := os.Mkdir(s.dataDir, 0o700); err != nil {
			return false, fmt.Errorf("make data directory: %w", err)
		}
		return true, chownTree(s.dataDir, s.cred)
	}
	if s.dataDir, err = filepath.Abs(dir); err != nil {
		return false, err
	}
	entries, err := os.ReadDir(s.dataDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
			return false, fmt.Errorf("make data directory: %w", err)
		}
		needInit = true
	case err != nil:
		return false, fmt.Errorf("read data directory: %w", err)
	case len(entries) == 0:
		needInit = true
	default:
		if _, err := os.Stat(filepath.Join(s.dataDir, "PG_VERSION")); err != nil {
			return false, fmt.Errorf("data directory %s is not empty and holds no PostgreSQL cluster (no PG_VERSION)", s.dataDir)
		}
	}
	// postgres insists on 0700 or 0750 and on owning the directory.
	if err := os.Chmod(s.dataDir, 0o700); err != nil {
		return false, err
	}
	if err := chownTree(s.dataDir, s.cred); err != nil {
		return false, fmt.Errorf("hand data directory to the postgres user: %w", err)
	}
	if err := ensureTraversable(s.dataDir, s.cred); err != nil {
		return false, err
	}
	return needInit, nil
}

// maxKeptLog is the size past which a kept cluster's <DataDir>.log is started
// afresh.
const maxKeptLog = 16 << 20

// openLog opens the server log file when the caller gave no Log.
func (s *Server) openLog() error {
	if s.userLog != nil {
		return nil
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if s.temp {
		s.logPath = filepath.Join(s.runDir, "postgres.log")
	} else {
		s.logPath = s.dataDir + ".log" // beside the cluster: initdb wants an empty directory
		if fi, err := os.Stat(s.logPath); err == nil && fi.Size() > maxKeptLog {
			flags |= os.O_TRUNC
		}
	}
	f, err := os.OpenFile(s.logPath, flags, 0o600)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	s.logFile = f
	return nil
}

// logWriter returns where initdb output goes.
func (s *Server) logWriter() io.Writer {
	if s.logFile != nil {
		return s.logFile
	}
	return s.userLog
}

// command builds an exec.Cmd for one of the PostgreSQL programs, run as
// s.cred, in its own process group, which is killed if ctx ends first.
func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, name), args...)
	cmd.Dir = "/" // our working directory may be unreadable for s.cred
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// initdb creates the cluster in s.dataDir.
func (s *Server) initdb(ctx context.Context) error {
	args := []string{"-D", s.dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"}
	if s.temp {
		args = append(args, "--no-sync")
	}
	out, err := s.command(ctx, "initdb", args...).CombinedOutput()
	fmt.Fprintf(s.logWriter(), "localpg: initdb %s\n%s", strings.Join(args, " "), out)
	if ctxErr := ctx.Err(); err != nil && ctxErr != nil {
		return fmt.Errorf("initdb: %w (%v)", ctxErr, err)
	}
	if err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

// exitError reports that the postmaster exited before accepting connections.
type exitError struct{ tail string }

func (e *exitError) Error() string {
	return "postgres exited before accepting connections" + e.tail
}

// launch starts the postmaster and waits until it accepts connections. The
// caller holds s.mu or has not published s yet.
func (s *Server) launch(ctx context.Context) error {
	args := []string{
		"-D", s.dataDir,
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + s.sockDir,
		"-c", "max_connections=200",
		"-c", "logging_collector=off",
	}
	sig := syscall.SIGINT // fast shutdown keeps a kept cluster clean
	if s.temp {
		// Both only matter if the machine crashes, not the server: a commit
		// still reaches the kernel before it returns, so Kill loses nothing.
		// (synchronous_commit=off would lose the last commits on Kill.)
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
		sig = syscall.SIGQUIT // immediate shutdown: the cluster is thrown away
	}
	args = append(args, s.extra...) // after ours: the last -c of a setting wins
	// Not tied to ctx, as the server outlives Start: launch kills it itself
	// when ctx ends before it is ready. context.Background has no Done
	// channel, so exec starts no goroutine to watch it.
	cmd := s.command(context.Background(), "postgres", args...)
	cmd.SysProcAttr.Pdeathsig = sig

	var (
		logOffset int64 = -1
		tail      *tailBuffer
		pr, pw    *os.File
	)
	switch w := s.logWriter().(type) {
	case *os.File:
		cmd.Stdout, cmd.Stderr = w, w
		if s.logFile != nil {
			if fi, err := s.logFile.Stat(); err == nil {
				logOffset = fi.Size()
			}
		}
	default:
		var err error
		if pr, pw, err = os.Pipe(); err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = pw, pw
		tail = &tailBuffer{}
	}
	err := cmd.Start()
	if pw != nil {
		pw.Close()
	}
	if err != nil {
		if pr != nil {
			pr.Close()
		}
		return fmt.Errorf("run postgres: %w", err)
	}
	// We reap the postmaster ourselves (Wait4), so no goroutine waits on it.
	s.pid = cmd.Process.Pid
	_ = cmd.Process.Release()
	if pr != nil {
		done := make(chan struct{})
		s.copyDone = done
		go func() {
			defer close(done)
			defer pr.Close()
			_, _ = io.Copy(io.MultiWriter(tail, s.userLog), pr)
		}()
	}
	logTail := func() string {
		switch {
		case tail != nil:
			s.waitCopier(2 * time.Second)
			return "; server log ends with:\n" + tail.String()
		case logOffset >= 0:
			return "; server log (" + s.logPath + ") ends with:\n" + readTail(s.logPath, logOffset)
		default:
			return "; see the server log"
		}
	}

	connURL := s.URL("postgres")
	var lastErr error
	for {
		if ReapNoHang(s.pid) {
			s.pid = 0
			return &exitError{tail: logTail()}
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, connURL)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			s.killAll()
			return fmt.Errorf("wait for postgres to accept connections: %w (last attempt: %v)%s", ctx.Err(), lastErr, logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitCopier waits up to timeout for the log copier goroutine to finish.
func (s *Server) waitCopier(timeout time.Duration) {
	if s.copyDone == nil {
		return
	}
	select {
	case <-s.copyDone:
	case <-time.After(timeout):
	}
}

// killAll SIGKILLs the postmaster and its children at once and reaps the
// postmaster. (Backends are not in the postmaster's process group: each
// child calls setsid.) The caller holds s.mu.
func (s *Server) killAll() {
	if s.pid == 0 {
		return
	}
	// Stopped, the postmaster can neither fork nor reap, so the children
	// listed stay (at worst as zombies) until they are killed.
	_ = syscall.Kill(s.pid, syscall.SIGSTOP)
	children := childPIDs(s.pid)
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	_ = syscall.Kill(s.pid, syscall.SIGKILL)
	reap(s.pid, 10*time.Second)
	s.pid = 0
	waitGone(children, 10*time.Second)
	s.waitCopier(5 * time.Second)
}

// shutdown stops a running postmaster with pg_ctl stop -m fast, falling back
// to SIGKILL. The caller holds s.mu.
func (s *Server) shutdown() error {
	if s.pid == 0 {
		return nil
	}
	if ReapNoHang(s.pid) { // died on its own
		s.pid = 0
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
	defer cancel()
	out, err := s.command(ctx, "pg_ctl", "stop", "-D", s.dataDir, "-m", "fast", "-w", "-t", "60", "-s").CombinedOutput()
	if err == nil && reap(s.pid, 10*time.Second) {
		s.pid = 0
		s.waitCopier(5 * time.Second)
		return nil
	}
	s.killAll()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s (server killed instead)", err, strings.TrimSpace(string(out)))
	}
	return errors.New("postgres did not exit after pg_ctl stop (server killed instead)")
}

// teardown stops the server if it runs and removes what Start made: the run
// directory (with a throwaway cluster in it) and the log file handle. The
// caller holds s.mu.
func (s *Server) teardown() error {
	err := s.shutdown()
	if s.temp && s.dataDir != "" {
		removeStaleShm(s.dataDir) // left by Kill when not restarted
	}
	if s.logFile != nil {
		s.logFile.Close()
		s.logFile = nil
	}
	if rmErr := os.RemoveAll(s.runDir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("remove %s: %w", s.runDir, rmErr))
	}
	return err
}

// URL returns the connection URL for database dbname as the superuser
// postgres: postgres://postgres@127.0.0.1:PORT/dbname?sslmode=disable.
func (s *Server) URL(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, url.PathEscape(dbname))
}

// Port returns the TCP port the server listens on at 127.0.0.1.
func (s *Server) Port() int { return s.port }

// DataDir returns the cluster directory (inside a temporary directory for a
// throwaway cluster).
func (s *Server) DataDir() string { return s.dataDir }

// LogPath returns the file the server logs to, or "" when Options.Log was
// given.
func (s *Server) LogPath() string { return s.logPath }

// Stop shuts the server down (pg_ctl stop -m fast, then waits for it; a
// server that does not stop is killed) and removes the temporary directory,
// including a throwaway cluster. A kept DataDir stays. Calling Stop again,
// or after Kill, is safe.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	if err := s.teardown(); err != nil {
		return fmt.Errorf("stop postgres: %w", err)
	}
	return nil
}

// Kill crashes the server for crash tests: it SIGKILLs the postmaster and,
// at the same moment, its children (the backends), like a power cut of the
// database, and waits for them to die. Restart brings it back, with
// crash recovery. Kill on a server that is not running does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("kill postgres: server was stopped")
	}
	s.killAll()
	return nil
}

// Restart starts the server again on the same port and data directory,
// typically after Kill; a running server is first stopped (fast shutdown).
// It retries while the previous incarnation's leftovers (shared memory still
// attached by dying backends) make the postmaster exit, until ctx ends.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("restart postgres: server was stopped")
	}
	if err := s.shutdown(); err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	for attempt := 1; ; attempt++ {
		err := s.launch(ctx)
		var ee *exitError
		if err == nil || !errors.As(err, &ee) || attempt >= 50 {
			if err != nil {
				return fmt.Errorf("restart postgres: %w", err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restart postgres: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// settingArgs turns settings into postmaster arguments, sorted by name so that
// the command line is the same from run to run.
func settingArgs(settings map[string]string) []string {
	names := make([]string, 0, len(settings))
	for name := range settings {
		names = append(names, name)
	}
	sort.Strings(names)
	args := make([]string, 0, 2*len(names))
	for _, name := range names {
		args = append(args, "-c", name+"="+settings[name])
	}
	return args
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portBusy reports whether someone listens on 127.0.0.1:port.
func portBusy(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return true
	}
	l.Close()
	return false
}

// readTail returns up to the last 4 KiB of path written after offset.
func readTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "(" + err.Error() + ")"
	}
	const max = 4096
	if fi.Size()-offset > max {
		offset = fi.Size() - max
	}
	b := make([]byte, fi.Size()-offset)
	n, _ := f.ReadAt(b, offset)
	return string(b[:n])
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-4096:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
