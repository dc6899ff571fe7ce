package clienttest_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// setup starts a real replica (own database and Redis prefix) and a Client for it.
func setup(t *testing.T, configure func(*server.Config)) (*testserver.Instance, *client.Client) {
	t.Helper()
	s := testserver.Start(t, testserver.Options{Configure: configure})
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// shortLease is the lease of tests that watch heartbeats keep a lease alive: 600 ms,
// with heartbeats every 150 ms.
const shortLease = 600 * time.Millisecond

// shortLeases configures a replica with shortLease.
func shortLeases(cfg *server.Config) {
	cfg.LeaseTimeout = shortLease
	cfg.HeartbeatInterval = shortLease / 4
}

// logger discards worker logs unless TASKFORGE_TEST_LOG is set.
func logger() *slog.Logger {
	if os.Getenv("TASKFORGE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// running is a Worker running in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

// start runs w until stop (or the end of the test).
func start(t *testing.T, w *client.Worker) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.stop(t, 30*time.Second) })
	return r
}

// stop cancels the worker's context and waits up to timeout for Run to return.
func (r *running) stop(t *testing.T, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	t0 := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // a later stop sees it too
		return time.Since(t0), err
	case <-time.After(timeout):
		t.Fatalf("worker did not stop within %s", timeout)
		return 0, nil
	}
}

// worker returns a Worker with test settings for c.
func worker(c *client.Client, id string, concurrency int) *client.Worker {
	return client.NewWorker(c, workerConfig(id, concurrency))
}

// workerConfig is the configuration worker uses, for tests that add to it.
func workerConfig(id string, concurrency int) client.WorkerConfig {
	return client.WorkerConfig{ID: id, Concurrency: concurrency, PollWait: 2 * time.Second,
		ShutdownGrace: 2 * time.Second, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, Logger: logger()}
}

// waitTask polls the task until cond holds and returns it.
func waitTask(t *testing.T, c *client.Client, queue, id string, timeout time.Duration, what string, cond func(*client.Task) bool) *client.Task {
	t.Helper()
	var last *client.Task
	testserver.Eventually(t, timeout, what, func() bool {
		task, err := c.GetTask(context.Background(), queue, id)
		if err != nil {
			t.Fatalf("get task: %v", err)
		}
		last = task
		return cond(task)
	})
	return last
}

func status(want string) func(*client.Task) bool {
	return func(t *client.Task) bool { return t.Status == want }
}

func must[T any](t *testing.T) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
