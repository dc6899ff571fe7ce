package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/internal/localpg"
	"github.com/taskforge/taskforge/internal/testenv"
)

// Timing of the cluster under test: short leases so that recovery takes seconds.
const (
	leaseTimeout      = 2 * time.Second
	heartbeatInterval = 500 * time.Millisecond
	// defaultWorkerConcurrency is each worker's --concurrency unless
	// TASKFORGE_CHAOS_WORKER_CONCURRENCY says otherwise.
	defaultWorkerConcurrency = 4
	numWorkers               = 8
	numReplicas              = 3
)

// serveEnv is the configuration of every replica.
var serveEnv = []string{
	"TASKFORGE_LEASE_TIMEOUT=" + leaseTimeout.String(),
	"TASKFORGE_HEARTBEAT_INTERVAL=" + heartbeatInterval.String(),
	"TASKFORGE_WATCHDOG_INTERVAL=200ms",
	"TASKFORGE_DISPATCH_INTERVAL=100ms",
	"TASKFORGE_BACKOFF_BASE=100ms",
	"TASKFORGE_BACKOFF_MAX=2s",
	"TASKFORGE_LOG_LEVEL=warn",
	"TASKFORGE_LOG_FORMAT=text",
}

// crashPoints are the crash points armed in replicas r1 and r2 during the fault
// window (r0 never crashes on its own). The odds are per pass of the point.
var crashPoints = map[int]string{
	1: "after-pop=0.01,after-claim-commit=0.01,after-dispatch-commit=0.05,after-ack-commit=0.01",
	2: "after-pop=0.005,after-claim-commit=0.005,after-dispatch-commit=0.02,after-ack-commit=0.005",
}

// harness owns every process of a run and the test's view of the cluster.
type harness struct {
	t *testing.T
	// workerConcurrency is each reference worker's --concurrency.
	workerConcurrency int
	bin               string
	pg                *localpg.Server
	dbURL             string
	db                *pgxpool.Pool
	redis             *testenv.RedisServer
	proxy             *proxy
	api               string // the proxy's URL: producers, probes and workers all go through it
	http              *http.Client
	start             time.Time // when the run started: offsets of requests and faults count from here
	replica           []*replica
	workers           []*workerSlot
	// schedules fire into the noop queue during the fault window.
	schedules []*chaosSchedule
	// workflows are submitted through POST /workflows during the fault window.
	workflows []wfSpec
	wfLedger  *wfLedger
	// push is the push queue's target; cancels and terms what the canceller and the
	// graceful stops did.
	push    *pushTarget
	cancels []cancelRecord
	terms   []termRecord

	mu     sync.Mutex
	events []*event // every injected fault and every crash-point exit, in order
}

// event is one fault as it happened.
type event struct {
	Kind    string    // a faultKind, or "crashpoint:<point>" for a replica that crashed on its own
	Target  string    // r1, w3.g2, ...
	At      time.Time // injection (for a pause: SIGSTOP)
	Back    time.Time // the target was running again (restart done, ready, SIGCONT); zero when n/a
	Victims []string  // worker ids (incarnations) killed or paused
	Note    string
}

func (h *harness) addEvent(e *event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// eventsSnapshot returns the events so far, in order of injection.
func (h *harness) eventsSnapshot() []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]event, len(h.events))
	for i, e := range h.events {
		out[i] = *e
	}
	slices.SortStableFunc(out, func(a, b event) int { return a.At.Compare(b.At) })
	return out
}

// newHarness starts PostgreSQL, Redis, the proxy, three replicas and eight workers,
// and registers their cleanup.
func newHarness(t *testing.T, workerConcurrency int) *harness {
	t.Helper()
	h := &harness{t: t, http: &http.Client{Timeout: 10 * time.Second}, workerConcurrency: workerConcurrency}
	h.bin = buildBinary(t)
	logDir, err := os.MkdirTemp("", "taskforge-chaos-logs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("TASKFORGE_CHAOS_KEEP_LOGS") != "" {
			t.Logf("process logs kept in %s", logDir)
			return
		}
		_ = os.RemoveAll(logDir)
	})

	h.pg = testenv.StartPostgresServer(t)
	h.redis = testenv.StartRedisServer(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, h.pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE taskforge")
	_ = admin.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.dbURL = h.pg.URL("taskforge")
	cfg, err := pgxpool.ParseConfig(h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	if h.db, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	// Cleanup runs in reverse: workers, then replicas, then the proxy and pool, all
	// before PostgreSQL and Redis (registered above) are stopped.
	t.Cleanup(h.db.Close)
	h.proxy = startProxy(t)
	h.api = "http://" + h.proxy.Addr()
	for i := range numReplicas {
		r := &replica{h: h, idx: i, port: testenv.FreePort(t), crashpoints: crashPoints[i],
			pgProxy:    startGatedProxy(t, fmt.Sprintf("127.0.0.1:%d", h.pg.Port())),
			redisProxy: startGatedProxy(t, h.redis.Addr),
			logPath:    filepath.Join(logDir, fmt.Sprintf("replica-r%d.log", i)),
			wake:       make(chan struct{}, 1), done: make(chan struct{})}
		r.URL = fmt.Sprintf("http://127.0.0.1:%d", r.port)
		h.replica = append(h.replica, r)
	}
	h.proxy.setBackends(h.replicaAddrs())
	t.Cleanup(func() {
		for _, r := range h.replica {
			r.stop()
		}
		if t.Failed() {
			for _, r := range h.replica {
				t.Logf("replica r%d log tail:\n%s", r.idx, tailFile(r.logPath, 25))
			}
		}
	})
	// r0 first, so that it applies the migrations alone; the others then find them done.
	h.replica[0].run()
	if !h.replica[0].waitReady(60 * time.Second) {
		t.Fatalf("replica r0 not ready within 60s; log:\n%s", tailFile(h.replica[0].logPath, 30))
	}
	for _, r := range h.replica[1:] {
		r.run()
	}
	for _, r := range h.replica[1:] {
		if !r.waitReady(60 * time.Second) {
			t.Fatalf("replica r%d not ready within 60s; log:\n%s", r.idx, tailFile(r.logPath, 30))
		}
	}
	for i := range numWorkers {
		h.workers = append(h.workers, &workerSlot{h: h, idx: i,
			logPath: filepath.Join(logDir, fmt.Sprintf("worker-w%d.log", i))})
	}
	t.Cleanup(func() {
		for _, w := range h.workers {
			w.kill()
		}
	})
	return h
}

func (h *harness) replicaAddrs() []string {
	out := make([]string, len(h.replica))
	for i, r := range h.replica {
		out[i] = fmt.Sprintf("127.0.0.1:%d", r.port)
	}
	return out
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildBinary builds ./cmd/taskforge once per test binary, without -race: the
// processes under test should run at production speed.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "taskforge-chaos-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "taskforge")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/taskforge/taskforge/cmd/taskforge")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(binPath)) })
	return binPath
}

// proc is one child process, in its own process group, killed if the test process
// dies (Pdeathsig).
type proc struct {
	cmd       *exec.Cmd
	done      chan struct{} // closed once the process has exited and been reaped
	logPath   string
	logOffset int64 // where this process's output starts in logPath
	exitCode  int   // valid after done; -1 when killed by a signal
}

// childEnv is the test's environment without settings that would leak into the
// processes under test.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "TASKFORGE_") || strings.HasPrefix(kv, "DATABASE_URL=") ||
			strings.HasPrefix(kv, "REDIS_URL=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func startProc(bin string, args, env []string, logPath string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), logPath: logPath, logOffset: fi.Size()}
	go func() {
		_ = cmd.Wait()
		p.exitCode = cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group, unless the process is gone.
func (p *proc) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// kill SIGKILLs the process group and waits for the process to be reaped.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second): // cannot happen short of a kernel problem
	}
}

// output returns what this process wrote to its log.
func (p *proc) output() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil || int64(len(b)) < p.logOffset {
		return ""
	}
	return string(b[p.logOffset:])
}

// replica is one `taskforge serve`, restarted by its supervisor whenever it exits
// unless a fault holds it down. It keeps its port across restarts.
type replica struct {
	h           *harness
	idx         int
	port        int
	URL         string
	logPath     string
	crashpoints string
	// Its own ways to PostgreSQL and Redis, which a partition fault cuts.
	pgProxy, redisProxy *gatedProxy

	mu       sync.Mutex
	cur      *proc
	held     bool // a fault killed it and keeps it down until release
	calm     bool // restart without crash points
	stopping bool
	running  bool // the supervisor was started
	wake     chan struct{}
	done     chan struct{} // closed when the supervisor returns
}

// run starts the supervisor; crash points are armed until restartCalm.
func (r *replica) run() {
	r.mu.Lock()
	r.running = true
	r.mu.Unlock()
	go r.supervise()
}

func (r *replica) name() string { return fmt.Sprintf("r%d", r.idx) }

func (r *replica) supervise() {
	defer close(r.done)
	for {
		r.mu.Lock()
		for r.held && !r.stopping {
			r.mu.Unlock()
			<-r.wake
			r.mu.Lock()
		}
		if r.stopping {
			r.mu.Unlock()
			return
		}
		env := childEnv(append([]string{
			"DATABASE_URL=" + withHostPort(r.h.dbURL, r.pgProxy.Addr()),
			"REDIS_URL=redis://" + r.redisProxy.Addr(),
			fmt.Sprintf("TASKFORGE_LISTEN=127.0.0.1:%d", r.port),
		}, append(serveEnv, retentionEnv...)...)...)
		if !r.calm && r.crashpoints != "" {
			env = append(env, "TASKFORGE_CRASHPOINTS="+r.crashpoints)
		}
		p, err := startProc(r.h.bin, []string{"serve"}, env, r.logPath)
		if err != nil {
			r.mu.Unlock()
			r.h.t.Errorf("start replica %s: %v", r.name(), err)
			return
		}
		r.cur = p
		r.mu.Unlock()

		<-p.done
		r.mu.Lock()
		held, stopping := r.held, r.stopping
		r.mu.Unlock()
		if stopping {
			return
		}
		if held {
			continue // a fault killed it; wait for release at the top of the loop
		}
		// It exited on its own: a crash point, or a start that failed because
		// PostgreSQL or Redis was down. Either way, start it again.
		pause := 500 * time.Millisecond
		if m := crashPointRE.FindStringSubmatch(p.output()); m != nil {
			r.h.addEvent(&event{Kind: "crashpoint:" + m[1], Target: r.name(), At: time.Now()})
			pause = 100 * time.Millisecond
		}
		hold(pause) // restart delay: part of the schedule, not synchronisation
	}
}

var crashPointRE = regexp.MustCompile(`crashpoint ([a-z-]+): exiting`)

// kill SIGKILLs the replica and keeps it down until release.
func (r *replica) kill() {
	r.mu.Lock()
	r.held = true
	p := r.cur
	r.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// release lets the supervisor start the replica again.
func (r *replica) release() {
	r.mu.Lock()
	r.held = false
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// restartCalm disarms the crash points: it stops the replica gracefully (SIGTERM)
// and lets the supervisor start it again without them.
func (r *replica) restartCalm() {
	r.mu.Lock()
	r.calm = true
	p := r.cur
	r.mu.Unlock()
	r.h.addEvent(&event{Kind: "graceful-restart", Target: r.name(), At: time.Now()})
	if p != nil {
		p.signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.kill()
		}
	}
	if !r.waitReady(60 * time.Second) {
		r.h.t.Errorf("replica %s not ready within 60s after its graceful restart", r.name())
	}
}

func (r *replica) stop() {
	r.mu.Lock()
	r.stopping = true
	p, running := r.cur, r.running
	r.mu.Unlock()
	if !running {
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
	if p != nil {
		p.kill()
	}
	<-r.done
	// The supervisor may have been between two incarnations.
	r.mu.Lock()
	p = r.cur
	r.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// waitReady polls /readyz until it answers 200 or timeout passes.
func (r *replica) waitReady(timeout time.Duration) bool {
	c := &http.Client{Timeout: time.Second}
	return poll(timeout, func() bool {
		resp, err := c.Get(r.URL + "/readyz")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// workerSlot is one of the eight reference workers; each restart is a new
// incarnation with its own worker id (w<slot>.g<generation>), so that attempts
// show which incarnation ran them.
type workerSlot struct {
	h       *harness
	idx     int
	logPath string

	mu  sync.Mutex
	gen int
	id  string
	p   *proc
}

func (w *workerSlot) start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	w.id = fmt.Sprintf("w%d.g%d", w.idx, w.gen)
	args := []string{"worker", "--server", w.h.api, "--concurrency", fmt.Sprint(w.h.workerConcurrency),
		"--worker-id", w.id, "--grace", "1s", "--poll-wait", "2s", "--log-level", "warn"}
	for _, q := range pollOrder(w.idx) {
		args = append(args, "--queue", q)
	}
	p, err := startProc(w.h.bin, args, childEnv(), w.logPath)
	if err != nil {
		return err
	}
	w.p = p
	return nil
}

// current returns the incarnation's id and process.
func (w *workerSlot) current() (string, *proc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.id, w.p
}

func (w *workerSlot) kill() {
	_, p := w.current()
	if p != nil {
		p.kill()
	}
}

// proxy is a round-robin TCP proxy in front of the replicas: each new connection
// goes to the next replica that accepts it, so a client whose replica died
// reconnects to a live one.
type proxy struct {
	ln       net.Listener
	next     atomic.Uint64
	mu       sync.Mutex
	backends []string
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

func startProxy(t *testing.T) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) setBackends(b []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends = b
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

func (p *proxy) handle(client net.Conn) {
	defer client.Close()
	p.mu.Lock()
	backends := p.backends
	p.mu.Unlock()
	first := p.next.Add(1)
	var server net.Conn
	for i := range len(backends) {
		c, err := net.DialTimeout("tcp", backends[(first+uint64(i))%uint64(len(backends))], time.Second)
		if err == nil {
			server = c
			break
		}
	}
	if server == nil {
		return // every replica is down: the client sees the connection close
	}
	defer server.Close()
	if !p.track(client) || !p.track(server) {
		return
	}
	defer p.untrack(client)
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// One side is finished: end both, as a replica that died would.
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// call sends one JSON request and returns the status and body. A transport error
// (connection refused or reset, timeout) is returned as err with status 0.
func (h *harness) call(ctx context.Context, method, path string, body any, header http.Header) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.api+path, r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, data, nil
}

// errorCode is error.code of a JSON error body, or "" when the body is not one.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

// mustCall retries a request through outages (transport errors and 5xx) until it
// gets a definitive answer or timeout passes.
func (h *harness) mustCall(method, path string, body any, timeout time.Duration) (int, []byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		status, data, err := h.call(context.Background(), method, path, body, nil)
		if err == nil && status < 500 {
			return status, data, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("status %d: %s", status, data)
			}
			return status, data, fmt.Errorf("%s %s: no definitive answer within %s: %w", method, path, timeout, err)
		}
		backoff(100 * time.Millisecond)
	}
}

// dbRetry runs fn against PostgreSQL, retrying through outages for up to timeout.
func (h *harness) dbRetry(timeout time.Duration, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := fn(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		backoff(100 * time.Millisecond)
	}
}

// poll waits up to timeout for cond, checking every 20 ms. Its conditions are
// other processes' states (a replica ready, a worker holding a task, a row in
// PostgreSQL), which send this process no event.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		backoff(20 * time.Millisecond)
	}
	return true
}

// hold lets d of the fault schedule's real time pass: when a fault strikes and how
// long a process stays dead, paused or cut off are what the run is about.
func hold(d time.Duration) { elapse(d) }

// backoff pauses before the next look at, or the next try of a call through an
// outage of, another process (PostgreSQL, Redis, a replica killed or cut off):
// that process's state and the outage's end tell this process nothing, so asking
// again is the only way to learn of them.
func backoff(d time.Duration) { elapse(d) }

// elapse is the chaos run's one wait on the wall clock, behind hold and backoff:
// the run is a fault schedule played in real time against other processes, and
// nothing they do reaches this process as an event.
func elapse(d time.Duration) { testenv.Elapse(d) }

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
