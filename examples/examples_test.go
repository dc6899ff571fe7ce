// Package examples_test builds the examples and runs them against a real server:
// the producer enqueues, the worker runs the task and stops cleanly on SIGTERM.
package examples_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestExamplesRunAgainstAServer(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	dir := t.TempDir()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go tool on PATH to build the examples: %v", err)
	}
	for _, name := range []string{"producer", "worker"} {
		build := exec.Command(goTool, "build", "-o", filepath.Join(dir, name), "./"+name)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
	}
	env := append(os.Environ(), "TASKFORGE_URL="+s.URL)

	// The producer creates the queue and enqueues once, even when run twice.
	var id string
	for i := range 2 {
		producer := exec.Command(filepath.Join(dir, "producer"))
		producer.Env = env
		out, err := producer.CombinedOutput()
		if err != nil {
			t.Fatalf("producer run %d: %v\n%s", i+1, err, out)
		}
		got, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "enqueued ")
		if !ok || (id != "" && got != id) {
			t.Fatalf("producer run %d printed %q (first run: %s)", i+1, out, id)
		}
		id = got
	}

	worker := exec.Command(filepath.Join(dir, "worker"))
	worker.Env = env
	var logs lockedBuffer
	worker.Stdout, worker.Stderr = &logs, &logs
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	t.Cleanup(func() {
		if worker.ProcessState == nil {
			_ = worker.Process.Kill()
			<-exited
		}
	})
	var task testserver.Task
	testserver.Eventually(t, 15*time.Second, "the worker to run the task", func() bool {
		task = s.Task("emails", id)
		return task.Status == "done"
	})
	if !strings.Contains(logs.String(), "sending a welcome mail to ada@example.com") {
		t.Errorf("worker log: %s", logs.String())
	}
	if err := worker.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("worker exited with %v after SIGTERM\n%s", err, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker still running 10s after SIGTERM")
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWorkflowExampleRunsThePipeline: the CI pipeline example submits its workflow,
// runs build, then test and lint, then deploy, and reports success; a second run
// finds the same workflow (its idempotency key) already succeeded.
func TestWorkflowExampleRunsThePipeline(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "workflow"), "./workflow")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build workflow: %v\n%s", err, out)
	}
	var first string
	for i := range 2 {
		cmd := exec.Command(filepath.Join(dir, "workflow"))
		cmd.Env = append(os.Environ(), "TASKFORGE_URL="+s.URL)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("run %d: %v\n%s%s", i+1, err, stdout.String(), stderr.String())
		}
		out := strings.TrimSpace(stdout.String())
		if !strings.HasPrefix(out, "workflow ") || !strings.HasSuffix(out, " succeeded") || (first != "" && out != first) {
			t.Fatalf("run %d printed %q (first run: %q)", i+1, out, first)
		}
		first = out
		if i == 0 {
			logs := stderr.String()
			at := func(s string) int { return strings.Index(logs, s) }
			b, ts, l, d := at("step build done"), at("step test done"), at("step lint done"), at("step deploy done")
			if b < 0 || ts < b || l < b || d < ts || d < l || !strings.Contains(logs, `build gave {"artifact":"app-4f2a9c1.tar.gz"}`) {
				t.Fatalf("steps out of order or missing:\n%s", logs)
			}
		}
	}
}
