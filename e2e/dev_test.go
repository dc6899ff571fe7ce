package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

// descendants lists the pids whose parent chain leads to pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so split after the last ')'.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 {
			if ppid, err := strconv.Atoi(fields[1]); err == nil {
				children[ppid] = append(children[ppid], p)
			}
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(stat[strings.LastIndexByte(string(stat), ')')+1:]), " Z ")
}

// TestDevStartsEverythingAndStopsClean runs `taskforge dev` with no DATABASE_URL or
// REDIS_URL: it starts its own PostgreSQL and an embedded Redis, runs the demo, and
// on SIGINT stops everything, PostgreSQL included.
func TestDevStartsEverythingAndStopsClean(t *testing.T) {
	t.Parallel()
	port := testenv.FreePort(t)
	cmd := exec.Command(taskforgeBinary(t), "dev", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", t.TempDir())
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "REDIS_URL=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	logPath := filepath.Join(t.TempDir(), "dev.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("dev log:\n%s", tail(string(log), 40))
		}
	})

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	c, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	testserver.Eventually(t, 90*time.Second, "dev ready", func() bool { return c.Readyz(ctx) == nil })
	testserver.Eventually(t, 60*time.Second, "demo tasks done", func() bool {
		st, err := c.Stats(ctx, "demo")
		return err == nil && st.Depth["done"] >= 3
	})
	resp := testserver.Do(t, base, "GET", "/admin", nil, nil)
	if resp.Status != 200 || !strings.Contains(string(resp.Body), "TaskForge") {
		t.Fatalf("dashboard: %d", resp.Status)
	}
	kids := descendants(cmd.Process.Pid)
	if len(kids) == 0 {
		t.Fatal("dev started no PostgreSQL process")
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("dev exited with %v after SIGINT", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dev did not exit within 30 s of SIGINT")
	}
	testserver.Eventually(t, 10*time.Second, "no leftover processes", func() bool {
		for _, pid := range kids {
			if alive(pid) {
				return false
			}
		}
		return true
	})
}
