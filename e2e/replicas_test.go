package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// taskforgeBinary builds ./cmd/taskforge once per test run.
func taskforgeBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "taskforge-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "taskforge")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/taskforge/taskforge/cmd/taskforge").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// replica is a `taskforge serve` process.
type replica struct {
	URL     string
	LogPath string // the process's stdout and stderr
	cmd     *exec.Cmd
}

func startReplica(t *testing.T, env []string) *replica {
	t.Helper()
	port := testenv.FreePort(t)
	cmd := exec.Command(taskforgeBinary(t), "serve")
	cmd.Env = append(os.Environ(), append(env, fmt.Sprintf("TASKFORGE_LISTEN=127.0.0.1:%d", port))...)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{URL: fmt.Sprintf("http://127.0.0.1:%d", port), LogPath: logFile.Name(), cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("replica %s log:\n%s", r.URL, tail(string(log), 40))
		}
	})
	testserver.Eventually(t, 30*time.Second, "replica ready", func() bool {
		resp, err := http.Get(r.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return r
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func TestTwoReplicasSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t)
	env := []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + testenv.RedisAddr(t),
		"TASKFORGE_REDIS_PREFIX=" + testenv.RedisPrefix(t),
		"TASKFORGE_LEASE_TIMEOUT=2s",
		"TASKFORGE_HEARTBEAT_INTERVAL=500ms",
		"TASKFORGE_WATCHDOG_INTERVAL=200ms",
		"TASKFORGE_DISPATCH_INTERVAL=100ms",
		"TASKFORGE_LOG_LEVEL=warn",
	}
	a := startReplica(t, env)
	b := startReplica(t, env)
	if resp := testserver.Do(t, a.URL, "POST", "/queues", map[string]any{"name": "q"}, nil); resp.Status != 201 {
		t.Fatalf("create queue: %d %s", resp.Status, resp.Body)
	}
	const n = 2000
	enqueueMany(t, b.URL, "q", n)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newLedger()
	wg := runWorkers(ctx, 8, []string{a.URL, b.URL}, "q", l)
	waitAcked(t, l, 500, 60*time.Second)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed replica A after %d acks", l.acked.Load())

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	testserver.Eventually(t, 90*time.Second, "every task done", func() bool {
		var done int
		_ = conn.QueryRow(ctx, `SELECT count(*) FROM all_tasks WHERE status = 'done'`).Scan(&done)
		return done == n
	})
	cancel()
	wg.Wait()

	redelivered := 0
	for _, times := range l.deliveries {
		if times > 1 {
			redelivered++
		}
	}
	var abandoned int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM all_attempts WHERE status = 'abandoned'`).Scan(&abandoned); err != nil {
		t.Fatal(err)
	}
	t.Logf("tasks delivered more than once: %d; abandoned attempts (claims lost with replica A): %d; refused acks: %v",
		redelivered, abandoned, l.ackErrors)
	if redelivered > abandoned {
		t.Errorf("%d tasks were re-delivered but only %d attempts were abandoned: a double claim", redelivered, abandoned)
	}
	verifyAllDoneOnce(t, dbURL, "q", n)
}
