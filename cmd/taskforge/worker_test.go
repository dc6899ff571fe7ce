package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

// TestWorkerCommandHandlers runs `taskforge worker` with every built-in handler
// and checks what each did to its tasks, then stops it as a signal would.
func TestWorkerCommandHandlers(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	for _, q := range []string{"e", "f", "s", "n"} {
		e.s.CreateQueue(q, nil)
	}
	e.s.CreateQueue("z", map[string]any{"max_retries": 0})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := &cobra.Command{Use: "taskforge", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(workerCommand())
	var logs syncBuffer
	root.SetErr(&logs)
	root.SetOut(&logs)
	root.SetArgs([]string{"worker", "--server", e.s.URL, "--worker-id", "ref-worker", "--concurrency", "4", "--grace", "1s",
		"--queue", "e=echo", "--queue", "f=fail", "--queue", "s=sleep", "--queue", "n=noop", "--queue", "z=snooze"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	echo := e.s.Enqueue("e", map[string]any{"payload": map[string]any{"hello": "world", "n": 1}})
	fail := e.s.Enqueue("f", map[string]any{"payload": map[string]any{"fail_times": 2}})
	sleep := e.s.Enqueue("s", map[string]any{"payload": map[string]any{"ms": 50}})
	badSleep := e.s.Enqueue("s", map[string]any{"payload": map[string]any{"ms": -1}})
	noop := e.s.Enqueue("n", map[string]any{"payload": nil})
	snooze := e.s.Enqueue("z", map[string]any{"payload": map[string]any{"snooze_times": 2, "ms": 100}})
	final := func(q, id string) testserver.Task {
		var got testserver.Task
		testserver.Eventually(t, 15*time.Second, "task "+id+" finished", func() bool {
			got = e.s.Task(q, id)
			return got.Status == client.StatusDone || got.Status == client.StatusDead
		})
		return got
	}
	if got := final("e", echo.ID); got.Status != client.StatusDone || !jsonEqual(got.Result, echo.Payload) {
		t.Errorf("echo: %s with result %s, want done with %s", got.Status, got.Result, echo.Payload)
	}
	if got := final("f", fail.ID); got.Status != client.StatusDone || got.Attempts != 3 ||
		!strings.Contains(*got.AttemptHistory[1].Error, "planned failure 2 of 2") {
		t.Errorf("fail: %s after %d attempts %+v, want done after 3", got.Status, got.Attempts, got.AttemptHistory)
	}
	if got := final("s", sleep.ID); got.Status != client.StatusDone || got.AttemptHistory[0].WorkerID != "ref-worker" {
		t.Errorf("sleep: %+v", got)
	} else if d := got.AttemptHistory[0].FinishedAt.Sub(got.AttemptHistory[0].StartedAt); d < 50*time.Millisecond {
		t.Errorf("sleep of 50ms took %s", d)
	}
	if got := final("s", badSleep.ID); got.Status != client.StatusDead || got.Attempts != 1 {
		t.Errorf("sleep with a negative duration: %s after %d attempts, want dead after 1", got.Status, got.Attempts)
	}
	if got := final("n", noop.ID); got.Status != client.StatusDone {
		t.Errorf("noop: %s", got.Status)
	}
	if got := final("z", snooze.ID); got.Status != client.StatusDone || got.Attempts != 3 || got.Releases != 2 {
		t.Errorf("snooze: %s after %d attempts, %d releases, want done after 3 (a queue allowing one run)", got.Status, got.Attempts, got.Releases)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker exited with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("worker did not stop")
	}
	contains(t, "worker log", logs.String(), "worker started", "worker_id=ref-worker", "worker stopped")
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && jsonString(x) == jsonString(y)
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestWorkerCommandUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"worker"},
		{"worker", "--queue", "q=bogus"},
		{"worker", "--queue", "q"},
		{"worker", "--queue", "=noop"},
		{"worker", "--queue", "q=noop", "--concurrency", "0"},
		{"worker", "--queue", "q=noop", "--prefetch", "-1"},
		{"worker", "--queue", "q=noop", "--prefetch", "101"},
		{"worker", "--queue", "q=noop", "--prefetch-below", "0s"},
		{"worker", "--queue", "q=noop", "--log-level", "loud"},
		{"worker", "--queue", "q=noop", "--server", "nowhere"},
		{"worker", "--queue", "q=noop", "--grace", "soon"},
		{"worker", "stray-arg", "--queue", "q=noop"},
	} {
		if r := run(t, "", args...); r.code != exitUsage {
			t.Errorf("taskforge %s: exit %d, want %d\n%s", strings.Join(args, " "), r.code, exitUsage, r.stderr)
		}
	}
}

// TestWorkerCommandSIGTERM runs the real command (main, with its signal handling)
// as its own process, holding two tasks with 30 s leases, and sends it SIGTERM. It
// must exit 0 within its grace period and hand both tasks back, so that another
// worker runs them at once rather than after the leases expire.
func TestWorkerCommandSIGTERM(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) { c.LeaseTimeout = 30 * time.Second }})
	s.CreateQueue("q", nil)
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	const grace = 500 * time.Millisecond
	cmd := exec.Command(os.Args[0], "worker", "--server", s.URL, "--queue", "q=sleep", "--worker-id", "sig-worker",
		"--concurrency", "2", "--grace", grace.String())
	// (A race-enabled binary sleeps 1s at exit unless told not to.)
	cmd.Env = append(os.Environ(), envRunMain+"=1", "GORACE=atexit_sleep_ms=0")
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	ids := map[string]bool{}
	for range 2 {
		ids[s.Enqueue("q", map[string]any{"payload": map[string]any{"ms": 60000}}).ID] = true
	}
	testserver.Eventually(t, 15*time.Second, "both tasks executing on sig-worker", func() bool {
		p, err := c.ListTasks(ctx, "q", client.TaskFilter{Status: client.StatusExecuting, WorkerID: "sig-worker"})
		return err == nil && len(p.Tasks) == 2
	})

	// Another worker, idle until the first hands its tasks back.
	var mu sync.Mutex
	redelivered := map[string]time.Time{}
	b := client.NewWorker(c, client.WorkerConfig{ID: "other-worker", Concurrency: 2, PollWait: 2 * time.Second,
		Logger: discardLogger()})
	b.Handle("q", func(_ context.Context, job *client.Job) error {
		mu.Lock()
		redelivered[job.ID] = time.Now()
		mu.Unlock()
		return nil
	})
	bctx, stopB := context.WithCancel(ctx)
	bdone := make(chan error, 1)
	go func() { bdone <- b.Run(bctx) }()
	defer func() { stopB(); <-bdone }()
	testserver.Eventually(t, 5*time.Second, "the other worker polling", func() bool {
		ws, err := c.ListWorkers(ctx)
		return err == nil && len(ws) == 2
	})

	t0 := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		took := time.Since(t0)
		t.Logf("SIGTERMed worker exited (%v) %s after the signal (grace %s)", err, took, grace)
		if err != nil || took > grace+2*time.Second {
			t.Fatalf("worker exited with %v after %s, want exit 0 within the grace period\n%s", err, took, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("worker still running 10s after SIGTERM\n%s", logs.String())
	}
	for id := range ids {
		got := waitDone(t, s, id)
		h := got.AttemptHistory
		if len(h) != 2 || h[0].WorkerID != "sig-worker" || !strings.Contains(*h[0].Error, "shut down") || h[1].WorkerID != "other-worker" {
			t.Fatalf("task %s attempts %+v", id, h)
		}
		mu.Lock()
		t.Logf("task %s re-delivered to the other worker %s after SIGTERM (lease 30s)", id, redelivered[id].Sub(t0))
		if d := redelivered[id].Sub(t0); d > grace+2*time.Second {
			t.Errorf("task re-delivered %s after SIGTERM", d)
		}
		mu.Unlock()
	}
	contains(t, "worker log", logs.String(), "worker started", "worker stopped")

	// The real binary's exit codes follow the contract too.
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"queue", "get", "nope", "--server", s.URL}, exitNotFound},
		{[]string{"queue", "create", "q", "--server", s.URL}, exitConflict},
		{[]string{"queue", "list", "--server", s.URL, "--output", "xml"}, exitUsage},
		{[]string{"queue", "list", "--server", s.URL}, 0},
	} {
		cmd := exec.Command(os.Args[0], tc.args...)
		cmd.Env = append(os.Environ(), envRunMain+"=1", "GORACE=atexit_sleep_ms=0")
		out, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
		if code != tc.code {
			t.Errorf("taskforge %s: exit %d, want %d\n%s", strings.Join(tc.args, " "), code, tc.code, out)
		}
		if code != 0 && !bytes.HasPrefix(out, []byte("taskforge: ")) {
			t.Errorf("taskforge %s printed %q, want a taskforge: <error> line", strings.Join(tc.args, " "), out)
		}
	}
}

func waitDone(t *testing.T, s *testserver.Instance, id string) testserver.Task {
	t.Helper()
	var got testserver.Task
	testserver.Eventually(t, 5*time.Second, "task "+id+" done", func() bool {
		got = s.Task("q", id)
		return got.Status == client.StatusDone
	})
	return got
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestWorkerCommandProtocols: `taskforge worker --protocol plain|batched` runs
// the built-in handlers over the bare protocol: every task done in one attempt
// by the named worker (with echo's result), failures nacked and retried, and a
// stop ends the command with 0.
func TestWorkerCommandProtocols(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"plain", "batched"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			e := newCLIEnv(t)
			e.s.CreateQueue("q", nil)
			e.s.CreateQueue("e", nil)
			e.s.CreateQueue("f", nil)
			var ids []string
			for i := 0; i < 30; i++ {
				ids = append(ids, e.s.Enqueue("q", map[string]any{"payload": i}).ID)
			}
			echo := e.s.Enqueue("e", map[string]any{"payload": map[string]any{"x": 1}})
			fail := e.s.Enqueue("f", map[string]any{"payload": map[string]any{"fail_times": 1}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			root := &cobra.Command{Use: "taskforge", SilenceUsage: true, SilenceErrors: true}
			root.AddCommand(workerCommand())
			var logs syncBuffer
			root.SetErr(&logs)
			root.SetArgs([]string{"worker", "--server", e.s.URL, "--worker-id", "w-" + protocol, "--concurrency", "8",
				"--protocol", protocol, "--poll-wait", "1s", "--queue", "q=noop", "--queue", "e=echo", "--queue", "f=fail"})
			done := make(chan error, 1)
			go func() { done <- root.ExecuteContext(ctx) }()
			for _, id := range ids {
				if got := waitDone(t, e.s, id); got.Attempts != 1 || got.AttemptHistory[0].WorkerID != "w-"+protocol {
					t.Fatalf("task %s: %d attempts %+v", id, got.Attempts, got.AttemptHistory)
				}
			}
			var got testserver.Task
			testserver.Eventually(t, 15*time.Second, "echo done", func() bool { got = e.s.Task("e", echo.ID); return got.Status == client.StatusDone })
			if !jsonEqual(got.Result, echo.Payload) {
				t.Errorf("echo result %s, want %s", got.Result, echo.Payload)
			}
			testserver.Eventually(t, 15*time.Second, "fail done on its second attempt", func() bool {
				got = e.s.Task("f", fail.ID)
				return got.Status == client.StatusDone
			})
			if got.Attempts != 2 || got.AttemptHistory[0].Status != "failed" {
				t.Errorf("fail: %d attempts %+v", got.Attempts, got.AttemptHistory)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("worker: %v\n%s", err, logs.String())
				}
			case <-time.After(15 * time.Second):
				t.Fatal("worker did not stop")
			}
		})
	}
}
