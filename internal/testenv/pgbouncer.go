package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskforge/taskforge/internal/localpg"
)

// EnvCI names the variable CI sets (to any value). Under it a test that needs a
// server program the machine lacks fails instead of skipping.
const EnvCI = "CI"

// PgBouncerPoolSize is how many server connections a StartPgBouncer pool opens
// to PostgreSQL. It is small on purpose: clients share server connections, as
// behind a production pooler, so state a client leaves on a session shows up in
// another client's transactions.
const PgBouncerPoolSize = 2

// PgBouncer is a pgbouncer process in transaction pooling mode in front of one
// test database, dedicated to one test.
type PgBouncer struct {
	// URL reaches the test database through PgBouncer, with the same user and
	// database name as the direct URL.
	URL string
	// LogPath is PgBouncer's log.
	LogPath string

	pid int
}

// pgbouncerDirs are where Debian installs pgbouncer, for when sbin is not on PATH.
var pgbouncerDirs = []string{"/usr/sbin", "/usr/local/sbin"}

// findPgBouncer returns the path of the pgbouncer program: on PATH, else in
// Debian's sbin directories.
func findPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, d := range pgbouncerDirs {
		p := filepath.Join(d, "pgbouncer")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("pgbouncer not found on PATH or in " + strings.Join(pgbouncerDirs, ", ") +
		": install the Debian package `pgbouncer`")
}

// StartPgBouncer starts pgbouncer on a free port of 127.0.0.1 in front of the
// database at dbURL (as returned by NewDatabase), with pool_mode=transaction,
// auth_type=trust, PgBouncerPoolSize server connections and its configuration
// in t.TempDir(); t.Cleanup kills it. When pgbouncer is not installed the test
// is skipped, or fails when $CI is set.
func StartPgBouncer(t testing.TB, dbURL string) *PgBouncer {
	t.Helper()
	bin, err := findPgBouncer()
	if err != nil {
		if os.Getenv(EnvCI) != "" {
			t.Fatalf("testenv: %v (and $%s is set: under CI this is a failure, not a skip)", err, EnvCI)
		}
		t.Skipf("testenv: %v", err)
	}
	target, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("testenv: parse %s: %v", dbURL, err)
	}
	cred, err := localpg.ServerCredential() // pgbouncer refuses to run as root
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(quote(target.User)+` ""`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := localpg.HandOver(dir, cred); err != nil {
		t.Fatalf("testenv: hand %s to the pgbouncer user: %v", dir, err)
	}

	var b *PgBouncer
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		b, err = launchPgBouncer(bin, dir, port, target, cred)
		var ee *pgbouncerExitError
		// Another process may have taken the port we picked; pick again.
		if err == nil {
			break
		}
		if !errors.As(err, &ee) || attempt == 5 {
			t.Fatalf("testenv: start pgbouncer: %v", err)
		}
	}
	t.Cleanup(b.kill)
	return b
}

// quote makes s one double-quoted token of a PgBouncer auth file.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// pgbouncerExitError reports that pgbouncer exited before accepting connections.
type pgbouncerExitError struct{ log string }

func (e *pgbouncerExitError) Error() string {
	return "pgbouncer exited before accepting connections; its log ends with:\n" + e.log
}

// launchPgBouncer writes the configuration for port, starts pgbouncer and waits
// until a query through it answers.
func launchPgBouncer(bin, dir string, port int, target *pgconn.Config, cred *syscall.Credential) (*PgBouncer, error) {
	conf := filepath.Join(dir, "pgbouncer.ini")
	// Server side: the test database as the direct URL names it. Client side: the
	// same database name and user, any password (trust).
	server := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", target.Host, target.Port, target.Database, target.User)
	if target.Password != "" {
		server += " password='" + strings.ReplaceAll(target.Password, "'", `\'`) + "'"
	}
	ini := fmt.Sprintf(`[databases]
%s = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 200
server_tls_sslmode = disable
ignore_startup_parameters = extra_float_digits
`, target.Database, server, port, filepath.Join(dir, "users.txt"), PgBouncerPoolSize)
	if err := os.WriteFile(conf, []byte(ini), 0o644); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(conf, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	logPath := filepath.Join(dir, "pgbouncer.log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, conf)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group, and death with the test process even before cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	u := url.URL{Scheme: "postgres", User: url.User(target.User), Host: fmt.Sprintf("127.0.0.1:%d", port),
		Path: "/" + target.Database, RawQuery: "sslmode=disable"}
	b := &PgBouncer{URL: u.String(), LogPath: logPath, pid: cmd.Process.Pid}
	_ = cmd.Process.Release() // reaped with wait4; no goroutine waits

	deadline := time.Now().Add(20 * time.Second)
	for {
		if localpg.ReapNoHang(b.pid) {
			b.pid = 0
			return nil, &pgbouncerExitError{log: readTail(logPath)}
		}
		if err := pingThrough(b.URL); err == nil {
			return b, nil
		} else if time.Now().After(deadline) {
			b.kill()
			return nil, fmt.Errorf("no answer through pgbouncer on port %d within 20s (%v); its log ends with:\n%s",
				port, err, readTail(logPath))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pingThrough runs one query over u.
func pingThrough(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

// readTail returns the last 4 KiB of the file at path.
func readTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// kill SIGKILLs and reaps pgbouncer.
func (b *PgBouncer) kill() {
	if b.pid == 0 {
		return
	}
	_ = syscall.Kill(b.pid, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for !localpg.ReapNoHang(b.pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	b.pid = 0
}
