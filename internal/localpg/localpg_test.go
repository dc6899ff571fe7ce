package localpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func connect(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestFindBinaries(t *testing.T) {
	dir, err := FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range serverPrograms {
		if !isNativeExecutable(filepath.Join(dir, name)) {
			t.Errorf("%s: no native %s", dir, name)
		}
	}
	if !strings.Contains(errNoBinaries.Error(), "install the Debian package `postgresql`") {
		t.Errorf("error text lacks the install hint: %v", errNoBinaries)
	}
}

func TestVersionLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"9.6", "15", true}, {"15", "9.6", false}, {"15", "16", true}, {"16", "16", false}, {"12", "12.1", true}} {
		if got := versionLess(c.a, c.b); got != c.want {
			t.Errorf("versionLess(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

// TestKillRestart is the crash test: a throwaway server is SIGKILLed and
// restarted, and committed data survives crash recovery.
func TestKillRestart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	if srv.Port() == 0 || !strings.Contains(srv.URL("x"), ":"+strconv.Itoa(srv.Port())+"/x?") {
		t.Fatalf("port %d, URL %s", srv.Port(), srv.URL("x"))
	}
	if os.Geteuid() == 0 {
		// The server must not run as root.
		conn := connect(t, ctx, srv.URL("postgres"))
		var user string
		if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil || user != "postgres" {
			t.Fatalf("current_user = %q, %v", user, err)
		}
	}

	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 1000) g"); err != nil {
		t.Fatal(err)
	}

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("connection still works after Kill")
	}
	conn.Close(ctx)
	if _, err := pgx.Connect(ctx, srv.URL("postgres")); err == nil {
		t.Fatal("new connection works after Kill")
	}
	if err := srv.Kill(); err != nil { // killing a dead server is a no-op
		t.Fatal(err)
	}

	port := srv.Port()
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.Port() != port {
		t.Fatalf("port changed from %d to %d", port, srv.Port())
	}
	conn = connect(t, ctx, srv.URL("postgres"))
	var n int
	var v string
	if err := conn.QueryRow(ctx, "SELECT count(*), max(v) FROM t").Scan(&n, &v); err != nil {
		t.Fatal(err)
	}
	if n != 1000 || v != "v999" {
		t.Fatalf("after restart: count %d, max %q", n, v)
	}
	// Restart of a running server stops it first.
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	dataDir := srv.DataDir()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("temporary data dir %s still exists (%v)", dataDir, err)
	}
	if !portFree(port) {
		t.Errorf("port %d still in use after Stop", port)
	}
	if err := srv.Restart(ctx); err == nil {
		t.Error("Restart after Stop succeeded")
	}
}

// TestKeptDataDir covers the `taskforge dev` case: a cluster in a given
// directory survives Stop and is reused (no initdb) by the next Start, and a
// caller-supplied Log writer gets the server log.
func TestKeptDataDir(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "nested", "pgdata")
	var log syncBuffer
	srv, err := Start(ctx, Options{DataDir: dir, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, ctx, srv.URL("postgres"))
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		t.Fatalf("kept cluster gone after Stop: %v", err)
	}
	if got := log.String(); !strings.Contains(got, "initdb") || !strings.Contains(got, "ready to accept connections") {
		t.Errorf("Log writer did not get initdb output and server log:\n%s", got)
	}

	fixed := freePortT(t)
	srv, err = Start(ctx, Options{DataDir: dir, Port: fixed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	if srv.Port() != fixed {
		t.Fatalf("Port() = %d, want %d", srv.Port(), fixed)
	}
	if srv.LogPath() != dir+".log" {
		t.Errorf("LogPath() = %q", srv.LogPath())
	}
	conn = connect(t, ctx, srv.URL("postgres"))
	var v string
	if err := conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != "hello" {
		t.Fatalf("reused cluster: %q, %v", v, err)
	}
	conn.Close(ctx)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(dir + ".log")
	if strings.Contains(string(b), "initdb") {
		t.Errorf("second Start ran initdb on an existing cluster:\n%s", b)
	}
}

func TestStartRejectsForeignDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "something"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Start(testCtx(t), Options{DataDir: dir})
	if err == nil || !strings.Contains(err.Error(), "start postgres:") || !strings.Contains(err.Error(), "no PostgreSQL cluster") {
		t.Fatalf("Start on a non-empty non-cluster dir: %v", err)
	}
}

func TestSweepStale(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	// A pid that surely belongs to no process: a child we waited for.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	mk := func(name, owner string) string {
		d := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(owner), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	stale := mk(runDirPrefix+"stale", strconv.Itoa(dead))
	mine := mk(runDirPrefix+"mine", strconv.Itoa(os.Getpid()))
	unowned := mk(runDirPrefix+"unowned", "")
	other := mk("other-"+"stale", strconv.Itoa(dead))
	sweepStale(base)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale dir not removed: %v", err)
	}
	for _, d := range []string{mine, unowned, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
}

func portFree(port int) bool { return !portBusy(port) }

func freePortT(t *testing.T) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCallerDeathStopsServer checks the crash-safety net: a process that
// exits without calling Stop leaves no server running (parent-death signal),
// and its temporary directory is swept by a later Start.
func TestCallerDeathStopsServer(t *testing.T) {
	if os.Getenv("LOCALPG_HELPER") == "1" {
		srv, err := Start(testCtx(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		// Print what the parent checks, then die without Stop.
		os.Stdout.WriteString("HELPER " + strconv.Itoa(srv.Port()) + " " + srv.DataDir() + "\n")
		os.Exit(0)
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCallerDeathStopsServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LOCALPG_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var port int
	var dataDir string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "HELPER" {
			port, _ = strconv.Atoi(f[1])
			dataDir = f[2]
		}
	}
	if port == 0 {
		t.Fatalf("helper printed no port:\n%s", out)
	}
	// The postmaster is not this process's child, but a pidfd tells of any
	// process's exit: wait on it rather than look again and again.
	pid, _ := readPostmasterPID(dataDir) // 0 when it already exited cleanly
	if err := waitExit(pid, 15*time.Second); err != nil {
		t.Fatalf("postmaster %d (port %d) after its caller died: %v", pid, port, err)
	}
	if portBusy(port) {
		t.Fatalf("port %d still taken after the postmaster %d exited", port, pid)
	}
	runDir := filepath.Dir(dataDir)
	if _, err := os.Stat(runDir); err != nil {
		t.Fatalf("run dir of the dead caller already gone: %v", err)
	}
	sweepStale(filepath.Dir(runDir))
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		t.Fatalf("run dir %s of the dead caller not swept (%v)", runDir, err)
	}
}

func TestStartHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	srv, err := Start(ctx, Options{})
	if err == nil {
		srv.Stop()
		t.Skip("server started within 300ms; nothing to check")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Start after deadline: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Start took %v after its deadline", d)
	}
}

// TestSettings: Options.Settings reach the server and win over Start's own
// (a throwaway cluster's fsync=off), while the settings they do not name keep
// Start's values.
func TestSettings(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv, err := Start(ctx, Options{Settings: map[string]string{
		"fsync": "on", "full_page_writes": "on", "shared_buffers": "32MB", "max_connections": "150",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	conn := connect(t, ctx, srv.URL("postgres"))
	for name, want := range map[string]string{
		"fsync": "on", "full_page_writes": "on", "shared_buffers": "32MB", "max_connections": "150",
		"listen_addresses": "127.0.0.1", "autovacuum": "on",
	} {
		var got string
		if err := conn.QueryRow(ctx, "SHOW "+name).Scan(&got); err != nil {
			t.Fatalf("SHOW %s: %v", name, err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

// waitExit waits up to timeout for process pid, which need not be a child of this
// one, to exit; pid 0 or a process already gone returns at once.
func waitExit(pid int, timeout time.Duration) error {
	if pid <= 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	} else if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(fd)
	for deadline := time.Now().Add(timeout); ; {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("still running after %s", timeout)
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds())+1)
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return fmt.Errorf("poll pidfd: %w", err)
		case n > 0: // readable: the process exited
			return nil
		}
	}
}
