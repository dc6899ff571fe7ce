package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process the harness started: `serve` or `worker`. It runs in a
// process group of its own, so signals reach it and anything it might spawn, and
// it gets SIGKILL if the harness dies first.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string        // path of its combined stdout and stderr
	done chan struct{} // closed once it has exited and been reaped
	err  error         // its exit status; read after done
}

// procSet tracks every process a Run started, so that none outlives it.
type procSet struct {
	mu    sync.Mutex
	procs map[*proc]struct{}
}

// start execs bin with args and env, output appended to logPath.
func (s *procSet) start(name, bin string, args, env []string, logPath string) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	s.mu.Lock()
	if s.procs == nil {
		s.procs = map[*proc]struct{}{}
	}
	s.procs[p] = struct{}{}
	s.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		s.mu.Lock()
		delete(s.procs, p)
		s.mu.Unlock()
	}()
	return p, nil
}

// pid is the process id, which is also its process group id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process's group.
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return fmt.Errorf("%s has exited: %v", p.name, p.err)
	}
	if err := syscall.Kill(-p.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	return nil
}

// kill SIGKILLs the process group and waits until the process is reaped. Once
// the process is reaped its id may be reused, so its group is never signalled
// after that.
func (p *proc) kill() {
	if !p.exited() {
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	}
	<-p.done
}

// stop asks the process group to stop (SIGTERM) and kills it if it has not exited
// within grace. It reports whether the process exited on its own.
func (p *proc) stop(grace time.Duration) bool {
	if p.exited() {
		return true
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		p.kill()
		return false
	}
}

// killAll SIGKILLs every process still running and waits for them.
func (s *procSet) killAll() {
	s.mu.Lock()
	left := make([]*proc, 0, len(s.procs))
	for p := range s.procs {
		left = append(left, p)
	}
	s.mu.Unlock()
	for _, p := range left {
		p.kill()
	}
}

// logTail returns the last n lines of the process's log.
func (p *proc) logTail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// childEnv is the harness's environment without the variables that would change
// what the children do behind the harness's back (server settings, tracing); the
// harness sets the ones it means.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "TASKFORGE_") || strings.HasPrefix(k, "OTEL_") ||
			k == "DATABASE_URL" || k == "REDIS_URL" || k == "GOMAXPROCS" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}
