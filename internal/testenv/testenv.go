// Package testenv is the test harness every TaskForge test package uses to
// get a real PostgreSQL and a real Redis (never mocks).
//
// Each test package calls Main from its TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// and tests then ask for what they need: NewDatabase for a fresh, empty
// database of their own, RedisPrefix for a key prefix of their own on the
// shared Redis, StartRedisServer / StartPostgresServer for a dedicated
// server they may kill, flush or restart, or StartPgBouncer for a PgBouncer in
// transaction mode in front of their database.
//
// # Which servers
//
// PostgresURL uses, in order:
//   - the URL in TASKFORGE_TEST_DATABASE_URL, if set (it must allow
//     CREATE DATABASE);
//   - postgres://postgres@127.0.0.1:5432/postgres, if it answers within
//     about a second with a role that may create databases;
//   - a throwaway server started once per test process with
//     internal/localpg from the machine's PostgreSQL binaries.
//
// RedisAddr uses TASKFORGE_TEST_REDIS_ADDR if set, else 127.0.0.1:6379 if it
// answers PING, else a throwaway redis-server started once per test process
// (no persistence, free port).
//
// TASKFORGE_TEST_THROWAWAY=1 forces throwaway servers for both, even when
// local servers run or the URL variables are set: a test run that touches
// nothing shared.
//
// # Isolation and cleanup
//
// Every test gets its own database or key prefix, so tests may run with
// t.Parallel and several test binaries (go test ./...) may share the servers.
// Databases and keys are removed by t.Cleanup. Throwaway servers are stopped
// by Main after the tests ran, whether they passed or not; should the test
// process die before (a panic, a timeout, a kill), the servers get a
// parent-death signal and stop by themselves, and a later run removes their
// temporary directories.
//
// Nothing here keeps background goroutines between calls (no pools), so
// tests may check for leaks with goleak.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/taskforge/taskforge/internal/localpg"
	"github.com/taskforge/taskforge/internal/localredis"
)

// Environment variables read by the harness.
const (
	// EnvDatabaseURL names the variable holding the admin URL of the
	// PostgreSQL server to test against.
	EnvDatabaseURL = "TASKFORGE_TEST_DATABASE_URL"
	// EnvRedisAddr names the variable holding host:port of the Redis to
	// test against.
	EnvRedisAddr = "TASKFORGE_TEST_REDIS_ADDR"
	// EnvThrowaway names the variable that, set to 1, forces throwaway
	// servers for PostgresURL and RedisAddr.
	EnvThrowaway = "TASKFORGE_TEST_THROWAWAY"
)

const (
	localPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	localRedisAddr   = "127.0.0.1:6379"
	probeTimeout     = time.Second
	startTimeout     = 90 * time.Second
	opTimeout        = 30 * time.Second
)

// Main runs the tests of the package, then stops the throwaway servers this
// process started, and exits with the tests' exit code. Call it from
// TestMain.
func Main(m *testing.M) {
	os.Exit(run(m))
}

// run is Main without the exit.
func run(m *testing.M) int {
	code := m.Run()
	runCleanups()
	return code
}

var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

// atExit registers f to run when Main finishes the tests.
func atExit(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanups = append(cleanups, f)
}

// runCleanups runs the registered functions, last registered first.
func runCleanups() {
	cleanupMu.Lock()
	fs := cleanups
	cleanups = nil
	cleanupMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// forceThrowaway reports whether TASKFORGE_TEST_THROWAWAY asks for
// throwaway servers.
func forceThrowaway() bool {
	v, _ := strconv.ParseBool(os.Getenv(EnvThrowaway))
	return v
}

// throwawayPG is the process's throwaway PostgreSQL server, if one was
// started (for the package's own tests).
var throwawayPG *localpg.Server

var sharedPostgres = sync.OnceValues(func() (string, error) {
	if !forceThrowaway() {
		if u := os.Getenv(EnvDatabaseURL); u != "" {
			if err := checkPostgres(u, 10*time.Second); err != nil {
				return "", fmt.Errorf("%s: %w", EnvDatabaseURL, err)
			}
			return u, nil
		}
		if checkPostgres(localPostgresURL, probeTimeout) == nil {
			return localPostgresURL, nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	srv, err := localpg.Start(ctx, localpg.Options{})
	if err != nil {
		return "", fmt.Errorf("no server at %s or in %s, and a throwaway one failed: %w", localPostgresURL, EnvDatabaseURL, err)
	}
	throwawayPG = srv
	atExit(func() {
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		}
	})
	return srv.URL("postgres"), nil
})

// checkPostgres connects to u and checks that its role may create
// databases.
func checkPostgres(u string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user").Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("role may not create databases")
	}
	return nil
}

// PostgresURL returns the admin URL (database `postgres`) of the shared test
// PostgreSQL server: TASKFORGE_TEST_DATABASE_URL if set, else the local server
// on 127.0.0.1:5432 if it answers within about a second, else a throwaway
// server started once per process (see the package doc, also for
// TASKFORGE_TEST_THROWAWAY). It calls t.Fatal if no server can be had.
func PostgresURL(t testing.TB) string {
	t.Helper()
	u, err := sharedPostgres()
	if err != nil {
		t.Fatalf("testenv: no PostgreSQL server for tests: %v", err)
	}
	return u
}

// NewDatabase creates a fresh, empty database with a unique name
// (tf_test_<random>) on the PostgresURL server and returns its URL. When the
// test ends, t.Cleanup drops it with DROP DATABASE ... WITH (FORCE), which
// also ends connections the test left open.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin := PostgresURL(t)
	name := "tf_test_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := localpg.CreateDatabase(ctx, admin, name); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := localpg.DropDatabase(ctx, admin, name); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	return localpg.WithDatabase(admin, name)
}

// throwawayRedis is the process's throwaway Redis server, if one was started.
var throwawayRedis *RedisServer

var sharedRedis = sync.OnceValues(func() (string, error) {
	if !forceThrowaway() {
		if a := os.Getenv(EnvRedisAddr); a != "" {
			if err := pingRedis(a, 10*time.Second); err != nil {
				return "", fmt.Errorf("%s=%s: %w", EnvRedisAddr, a, err)
			}
			return a, nil
		}
		if pingRedis(localRedisAddr, probeTimeout) == nil {
			return localRedisAddr, nil
		}
	}
	r, err := startRedis()
	if err != nil {
		return "", fmt.Errorf("no server at %s or in %s, and a throwaway one failed: %w", localRedisAddr, EnvRedisAddr, err)
	}
	throwawayRedis = r
	atExit(r.stop)
	return r.Addr, nil
})

// RedisAddr returns host:port of the shared test Redis:
// TASKFORGE_TEST_REDIS_ADDR if set, else 127.0.0.1:6379 if it answers PING,
// else a throwaway redis-server started once per process (see the package
// doc, also for TASKFORGE_TEST_THROWAWAY). It calls t.Fatal if no server can
// be had.
func RedisAddr(t testing.TB) string {
	t.Helper()
	a, err := sharedRedis()
	if err != nil {
		t.Fatalf("testenv: no Redis server for tests: %v", err)
	}
	return a
}

// RedisPrefix returns a key prefix unique to the test ("tftest:<16 hex
// digits>") on the RedisAddr server. When the test ends, t.Cleanup deletes
// every key that starts with it (SCAN MATCH prefix* and UNLINK).
func RedisPrefix(t testing.TB) string {
	t.Helper()
	addr := RedisAddr(t)
	prefix := "tftest:" + randomHex(8)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := deleteKeys(ctx, addr, prefix+"*"); err != nil {
			t.Errorf("testenv: delete Redis keys %s*: %v", prefix, err)
		}
	})
	return prefix
}

// newRedisClient returns a go-redis client for addr with a plain handshake,
// for the harness's own short-lived use.
func newRedisClient(addr string, timeout time.Duration) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              timeout,
		ReadTimeout:              timeout,
		WriteTimeout:             timeout,
		MaxRetries:               -1,
		PoolSize:                 1,
	})
}

// pingRedis reports whether the Redis at addr answers PING within timeout.
func pingRedis(addr string, timeout time.Duration) error { return localredis.Ping(addr, timeout) }

// deleteKeys unlinks every key matching pattern.
func deleteKeys(ctx context.Context, addr, pattern string) error {
	c := newRedisClient(addr, 5*time.Second)
	defer c.Close()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// StartPostgresServer starts a throwaway PostgreSQL server dedicated to the
// test (for tests that kill or restart the database); t.Cleanup stops it and
// removes its files.
func StartPostgresServer(t testing.TB) *localpg.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	srv, err := localpg.Start(ctx, localpg.Options{})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return srv
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. It picks
// below the kernel's ephemeral range (ip_local_port_range): a port the kernel
// hands out for listen(":0") is also one it hands out as the source port of the
// next outgoing connection, so on a box busy with connections (a chaos run, a
// parallel suite) such a port was sometimes taken before the test listened on it.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p
}

func freePort() (int, error) { return localredis.FreePort() }

// randomHex returns n random bytes as lower-case hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
