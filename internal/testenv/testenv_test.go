package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/taskforge/taskforge/internal/localpg"
)

// TestMain is Main plus a goroutine leak check: the harness must leave no
// goroutines behind (no pools, no log copiers), or packages using goleak
// would fail.
func TestMain(m *testing.M) {
	code := run(m)
	if code == 0 && os.Getenv(helperEnv) == "" {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutine leak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func pgConnect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), u)
	if err != nil {
		t.Fatalf("connect %s: %v", u, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	var n int
	err := pgConnect(t, PostgresURL(t)).QueryRow(ctxT(t), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestNewDatabase(t *testing.T) {
	t.Parallel()
	var name string
	var leftOpen *pgx.Conn
	t.Run("inner", func(t *testing.T) {
		u := NewDatabase(t)
		conn := pgConnect(t, u)
		ctx := ctxT(t)
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "tf_test_") {
			t.Errorf("database name %q lacks the tf_test_ prefix", name)
		}
		var tables int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')").Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if tables != 0 {
			t.Errorf("fresh database has %d tables", tables)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE jobs (id bigint)"); err != nil {
			t.Fatal(err)
		}
		// A connection the test forgets to close must not block the drop.
		var err error
		if leftOpen, err = pgx.Connect(ctx, u); err != nil {
			t.Fatal(err)
		}
	})
	if leftOpen != nil {
		defer leftOpen.Close(context.Background())
	}
	if name == "" {
		t.FailNow()
	}
	if databaseExists(t, name) {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

func TestNewDatabaseParallel(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	t.Run("group", func(t *testing.T) {
		for i := range 6 {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				u := NewDatabase(t)
				mu.Lock()
				defer mu.Unlock()
				if seen[u] {
					t.Errorf("URL %s handed out twice", u)
				}
				seen[u] = true
			})
		}
	})
	if len(seen) != 6 {
		t.Errorf("got %d distinct databases, want 6", len(seen))
	}
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@h:5/postgres?sslmode=disable": "postgres://u:p@h:5/tf_x?sslmode=disable",
		"postgresql://h/":               "postgresql://h/tf_x",
		"host=h user=u dbname=postgres": "host=h user=u dbname=postgres dbname=tf_x",
	} {
		if got := localpg.WithDatabase(in, "tf_x"); got != want {
			t.Errorf("WithDatabase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedisPrefix(t *testing.T) {
	t.Parallel()
	addr := RedisAddr(t)
	c := redisClient(t, addr)
	ctx := ctxT(t)
	other := RedisPrefix(t)
	if err := c.Set(ctx, other+":keep", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var prefix string
	t.Run("inner", func(t *testing.T) {
		prefix = RedisPrefix(t)
		if !strings.HasPrefix(prefix, "tftest:") || prefix == other {
			t.Fatalf("prefix %q (other %q)", prefix, other)
		}
		pipe := c.Pipeline()
		for i := range 2500 { // several SCAN pages
			pipe.Set(ctx, prefix+":"+strconv.Itoa(i), i, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	})
	keys, _, err := c.Scan(ctx, 0, prefix+"*", 100000).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("%d keys with prefix %s left after its test ended", len(keys), prefix)
	}
	if n, err := c.Exists(ctx, other+":keep").Result(); err != nil || n != 1 {
		t.Errorf("key of another prefix was deleted: %d, %v", n, err)
	}
}

func TestStartRedisServer(t *testing.T) {
	t.Parallel()
	var addr string
	t.Run("inner", func(t *testing.T) {
		r := StartRedisServer(t)
		addr = r.Addr
		if addr == RedisAddr(t) {
			t.Fatalf("dedicated server shares the address %s of the shared one", addr)
		}
		c := redisClient(t, r.Addr)
		ctx := ctxT(t)
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		r.Kill()
		if err := pingRedis(r.Addr, time.Second); err == nil {
			t.Fatal("PING answered after Kill")
		}
		r.Kill() // no-op
		r.Restart(t)
		c = redisClient(t, r.Addr) // the old client's connection is dead
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING after Restart: %v", err)
		}
		if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("GET k after Restart: %v, want redis.Nil (empty data)", err)
		}
		r.Restart(t) // restart while running
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if addr != "" && pingRedis(addr, 200*time.Millisecond) == nil {
		t.Errorf("dedicated redis-server on %s still runs after its test ended", addr)
	}
}

func TestStartPostgresServer(t *testing.T) {
	t.Parallel()
	var port int
	t.Run("inner", func(t *testing.T) {
		srv := StartPostgresServer(t)
		port = srv.Port()
		conn := pgConnect(t, srv.URL("postgres"))
		if err := conn.Ping(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})
	if port != 0 && listening(port) {
		t.Errorf("dedicated postgres on port %d still runs after its test ended", port)
	}
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	p := FreePort(t)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("FreePort %d cannot be listened on: %v", p, err)
	}
	l.Close()
}

func listening(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// helperEnv makes TestHelperProcess act; its value is "pass" or "fail".
const helperEnv = "TESTENV_HELPER"

// TestHelperProcess is run by TestThrowawayServers in a child test process
// with TASKFORGE_TEST_THROWAWAY=1. It uses the shared servers, prints what
// they are, and fails on purpose in "fail" mode.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper for TestThrowawayServers")
	}
	u := NewDatabase(t)
	conn := pgConnect(t, u)
	if _, err := conn.Exec(ctxT(t), "CREATE TABLE x (id int)"); err != nil {
		t.Fatal(err)
	}
	c := redisClient(t, RedisAddr(t))
	if err := c.Set(ctxT(t), RedisPrefix(t)+":k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if throwawayPG == nil || throwawayRedis == nil {
		t.Fatalf("%s=1 did not give throwaway servers (pg %v, redis %v)", EnvThrowaway, throwawayPG, throwawayRedis)
	}
	fmt.Printf("HELPER pgport=%d pgdata=%s redis=%s\n", throwawayPG.Port(), throwawayPG.DataDir(), throwawayRedis.Addr)
	if mode == "fail" {
		t.Error("failing on purpose")
	}
}

// TestThrowawayServers runs TestHelperProcess in child processes with
// TASKFORGE_TEST_THROWAWAY=1 (and bogus URL variables, which it overrides)
// and checks that Main stopped the throwaway servers and removed their files
// once the tests were done, whether they passed or failed.
func TestThrowawayServers(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"pass", "fail"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(),
				helperEnv+"="+mode,
				EnvThrowaway+"=1",
				EnvDatabaseURL+"=postgres://nobody@127.0.0.1:1/none",
				EnvRedisAddr+"=127.0.0.1:1",
			)
			out, err := cmd.CombinedOutput()
			var exitErr *exec.ExitError
			switch {
			case mode == "pass" && err != nil:
				t.Fatalf("helper failed: %v\n%s", err, out)
			case mode == "fail" && !(errors.As(err, &exitErr) && exitErr.ExitCode() == 1):
				t.Fatalf("helper: %v, want exit status 1\n%s", err, out)
			}
			var pgPort int
			var pgData, redisAddr string
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "HELPER ") {
					fmt.Sscanf(sc.Text(), "HELPER pgport=%d pgdata=%s redis=%s", &pgPort, &pgData, &redisAddr)
				}
			}
			if pgPort == 0 || pgData == "" || redisAddr == "" {
				t.Fatalf("helper printed no servers:\n%s", out)
			}
			if pgPort == 5432 || redisAddr == localRedisAddr {
				t.Errorf("helper used the local servers (pg port %d, redis %s)", pgPort, redisAddr)
			}
			if listening(pgPort) {
				t.Errorf("throwaway postgres on port %d still runs after the process ended", pgPort)
			}
			if _, err := os.Stat(pgData); !os.IsNotExist(err) {
				t.Errorf("throwaway cluster %s still exists (%v)", pgData, err)
			}
			if pingRedis(redisAddr, 200*time.Millisecond) == nil {
				t.Errorf("throwaway redis on %s still runs after the process ended", redisAddr)
			}
		})
	}
}

// TestStartPgBouncer: queries through PgBouncer reach the test database, and the
// pool works per transaction: three clients connected at once all get answers from
// at most PgBouncerPoolSize server sessions (in session mode the third would wait).
func TestStartPgBouncer(t *testing.T) {
	t.Parallel()
	db := NewDatabase(t)
	b := StartPgBouncer(t, db)
	direct := pgConnect(t, db)
	var want string
	if err := direct.QueryRow(ctxT(t), "SELECT current_database()").Scan(&want); err != nil {
		t.Fatal(err)
	}
	backends := map[int32]bool{}
	for i := 0; i < PgBouncerPoolSize+1; i++ {
		conn := pgConnect(t, b.URL)
		var name string
		var pid int32
		if err := conn.QueryRow(ctxT(t), "SELECT current_database(), pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&name, &pid); err != nil {
			t.Fatalf("client %d through pgbouncer: %v", i, err)
		}
		if name != want {
			t.Fatalf("client %d reached database %q, want %q", i, name, want)
		}
		backends[pid] = true
	}
	if len(backends) > PgBouncerPoolSize {
		t.Fatalf("%d server sessions for %d clients, want at most %d", len(backends), PgBouncerPoolSize+1, PgBouncerPoolSize)
	}
}
