package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

// reply is one HTTP exchange as the operations tests see it: a transport error
// (connection refused or reset) is a value to assert on, not a test failure.
type reply struct {
	status int
	body   []byte
	err    error
	took   time.Duration
}

// code returns error.code of a JSON error body, or "" when there is none.
func (r reply) code() string {
	var b struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(r.body, &b) != nil || b.Error.Message == "" {
		return ""
	}
	return b.Error.Code
}

func (r reply) String() string {
	if r.err != nil {
		return fmt.Sprintf("transport error after %s: %v", r.took.Round(time.Millisecond), r.err)
	}
	return fmt.Sprintf("%d after %s: %.200s", r.status, r.took.Round(time.Millisecond), r.body)
}

// send makes one request on a connection of its own (no keep-alive reuse, so a
// request never races a server closing an idle connection) within timeout.
func send(method, url string, body any, timeout time.Duration) reply {
	return sendTraced(method, url, body, timeout, nil)
}

// sendTraced is send that calls wrote, if not nil, once the request is written.
func sendTraced(method, url string, body any, timeout time.Duration, wrote func()) reply {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return reply{err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return reply{err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if wrote != nil {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(),
			&httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote() }}))
	}
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return reply{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: data, err: err, took: time.Since(start)}
}

// watchExit reaps the replica's process in the background and returns a channel
// closed when it exits. Its cleanup runs before startReplica's (cleanups run last
// registered first), so the process is waited for exactly once at a time.
func watchExit(t *testing.T, r *replica) <-chan struct{} {
	exited := make(chan struct{})
	go func() {
		_ = r.cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-exited
	})
	return exited
}

// TestSIGTERMDrainsInFlightRequests: a serve process gets SIGTERM while four long
// polls (wait_ms 20000) are parked and three acks are stuck inside it (the test
// holds their task rows locked in PostgreSQL until 2 s after the signal). The long
// polls return 200 with an empty list at once, the listener closes (a load balancer
// moves on), the process stays up until the acks are answered 200, then exits 0
// within the 10 s drain timeout. No request is cut off.
func TestSIGTERMDrainsInFlightRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testenv.NewDatabase(t)
	r := startReplica(t, []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + testenv.RedisAddr(t),
		"TASKFORGE_REDIS_PREFIX=" + testenv.RedisPrefix(t),
		"TASKFORGE_DISPATCH_INTERVAL=100ms",
		"TASKFORGE_LOG_LEVEL=warn",
	})
	exited := watchExit(t, r)
	for _, q := range []string{"work", "idle"} {
		if resp := testserver.Do(t, r.URL, "POST", "/queues", map[string]any{"name": q}, nil); resp.Status != 201 {
			t.Fatalf("create queue %s: %d %s", q, resp.Status, resp.Body)
		}
	}
	// Three acks is below the replica's pool of 4 connections (max(4, CPUs) on two
	// cores), so the long polls are never starved of a connection.
	const acks, polls = 3, 4
	enqueueMany(t, r.URL, "work", acks)
	var leased []polled
	testserver.Eventually(t, 10*time.Second, "three tasks leased", func() bool {
		var out struct {
			Tasks []polled `json:"tasks"`
		}
		resp := testserver.Do(t, r.URL, "POST", "/workers/poll",
			map[string]any{"worker_id": "acker", "queues": []string{"work"}, "max_tasks": acks - len(leased)}, nil)
		resp.JSON(t, &out)
		leased = append(leased, out.Tasks...)
		return len(leased) == acks
	})

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	observer, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ids := make([]string, acks)
	for i, p := range leased {
		ids[i] = p.ID
	}
	if _, err := tx.Exec(ctx, `SELECT id FROM tasks WHERE id = ANY($1::uuid[]) FOR UPDATE`, ids); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	ackReplies := make([]reply, acks)
	var acksSent atomic.Int32
	for i, p := range leased {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ackReplies[i] = sendTraced("POST", r.URL+"/workers/ack",
				map[string]any{"worker_id": "acker", "task_id": p.ID, "lease_token": p.LeaseToken}, 30*time.Second,
				func() { acksSent.Add(1) })
		}()
	}
	pollReplies := make([]reply, polls)
	pollDone := make([]time.Time, polls)
	var pollsAnswered atomic.Int32
	for i := range polls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pollReplies[i] = send("POST", r.URL+"/workers/poll",
				map[string]any{"worker_id": fmt.Sprintf("poller-%d", i), "queues": []string{"idle"}, "wait_ms": 20000}, 30*time.Second)
			pollDone[i] = time.Now()
			pollsAnswered.Add(1)
		}()
	}
	// Acks may share a commit (the API groups concurrent acks): one statement waiting
	// on the locks shows they reached PostgreSQL; the rest queue behind it.
	testserver.Eventually(t, 10*time.Second, "the acks sent and stuck on the test's row locks", func() bool {
		var waiting int
		_ = observer.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return acksSent.Load() == acks && waiting >= 1
	})
	// Once the server handles these later requests, it has accepted the acks'
	// connections too (accept order is connection order).
	testserver.Eventually(t, 10*time.Second, "the long polls in the server", func() bool {
		var out struct {
			Workers []struct {
				ID string `json:"id"`
			} `json:"workers"`
		}
		testserver.Do(t, r.URL, "GET", "/workers", nil, nil).JSON(t, &out)
		n := 0
		for _, w := range out.Workers {
			for i := range polls {
				if w.ID == fmt.Sprintf("poller-%d", i) {
					n++
				}
			}
		}
		return n == polls
	})

	if n := pollsAnswered.Load(); n != 0 {
		t.Fatalf("%d long polls returned before SIGTERM; they should have been parked", n)
	}
	sigterm := time.Now()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The listener closes first: new connections are refused, so a load balancer
	// sends them elsewhere.
	testserver.Eventually(t, 5*time.Second, "the listener closed", func() bool {
		return send("GET", r.URL+"/healthz", nil, time.Second).err != nil
	})
	// The long polls come back at once, well before their 20 s.
	testserver.Eventually(t, 5*time.Second, "the long polls answered", func() bool {
		return pollsAnswered.Load() == polls
	})
	// The acks stay stuck for 2 s more: serve must wait for them, not exit.
	select {
	case <-exited:
		t.Fatal("serve exited while acks were still in flight")
	case <-time.After(2 * time.Second):
	}
	held := time.Since(sigterm)
	if err := tx.Rollback(ctx); err != nil { // let the acks through
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not exit within 15 s of SIGTERM")
	}
	exitAfter := time.Since(sigterm)
	wg.Wait()

	var slowest time.Duration
	for i, p := range pollReplies {
		var out struct {
			Tasks []polled `json:"tasks"`
		}
		if p.err != nil || p.status != 200 || json.Unmarshal(p.body, &out) != nil || out.Tasks == nil || len(out.Tasks) != 0 {
			t.Errorf("long poll %d: %v; want 200 with an empty task list", i, p)
		}
		if !pollDone[i].After(sigterm) {
			t.Errorf("long poll %d returned before SIGTERM", i)
		}
		slowest = max(slowest, pollDone[i].Sub(sigterm))
	}
	for i, a := range ackReplies {
		var task struct {
			Status string `json:"status"`
		}
		if a.err != nil || a.status != 200 || json.Unmarshal(a.body, &task) != nil || task.Status != "done" {
			t.Errorf("ack %d: %v; want 200 with the task done", i, a)
		}
	}
	t.Logf("after SIGTERM: long polls answered within %s; acks held for %s; process exited after %s (%s after the acks were let through)",
		slowest.Round(time.Millisecond), held.Round(time.Millisecond), exitAfter.Round(time.Millisecond),
		(exitAfter - held).Round(time.Millisecond))
	if slowest > 3*time.Second {
		t.Errorf("long polls took up to %s after SIGTERM to return; want them released at once", slowest)
	}
	if exitAfter > 10*time.Second+2*time.Second {
		t.Errorf("serve exited %s after SIGTERM, beyond its 10 s drain timeout", exitAfter)
	}
	if code := r.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("serve exited with code %d after SIGTERM, want 0", code)
	}
	var done int
	if err := observer.QueryRow(ctx, `SELECT count(*) FROM all_tasks t JOIN all_attempts a ON a.task_id = t.id
		WHERE t.id = ANY($1::uuid[]) AND t.status = 'done' AND a.status = 'succeeded'`, ids).Scan(&done); err != nil {
		t.Fatal(err)
	}
	if done != acks {
		t.Errorf("%d of the %d acked tasks are done in PostgreSQL", done, acks)
	}
}

// outage drives one outage of a backing service under a running replica: it
// checks that every probe made while the service is down gets the expected answer
// (a 503 unavailable JSON error, never a 500, a hang or a cut connection), then
// brings the service back and measures how long the replica takes to serve again.
type outage struct {
	t    *testing.T
	base string
}

// expect makes the request and reports whether it got status, with error code
// "unavailable" for a 503. A transport error or a hang fails the test.
func (o outage) expect(status int, method, path string, body any) (reply, bool) {
	o.t.Helper()
	r := send(method, o.base+path, body, 10*time.Second)
	if r.err != nil {
		o.t.Fatalf("%s %s during the outage: %v", method, path, r)
	}
	if r.took > 5*time.Second {
		o.t.Errorf("%s %s took %s during the outage; want a prompt answer", method, path, r.took)
	}
	if r.status != status {
		return r, false
	}
	if status == http.StatusServiceUnavailable && r.code() != "unavailable" {
		o.t.Errorf("%s %s: %v; want {\"error\":{\"code\":\"unavailable\"}}", method, path, r)
	}
	return r, true
}

// probe repeats the checks for window, failing on any answer other than the one
// expected, and returns how many rounds it made.
func (o outage) probe(window time.Duration, checks func() []string) int {
	o.t.Helper()
	rounds := 0
	for deadline := time.Now().Add(window); time.Now().Before(deadline); rounds++ {
		if bad := checks(); len(bad) > 0 {
			o.t.Fatalf("during the outage: %v", bad)
		}
		testenv.Elapse(100 * time.Millisecond) // the probes' pace through the outage window; nothing waits on it
	}
	return rounds
}

// internalErrors scrapes the replica's /metrics for requests it answered 500
// (taskforge_http_requests_total{code="500"}), by route.
func internalErrors(t *testing.T, base string) map[string]string {
	t.Helper()
	r := send("GET", base+"/metrics", nil, 10*time.Second)
	if r.err != nil || r.status != 200 {
		t.Fatalf("GET /metrics: %v", r)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(r.body), "\n") {
		if strings.HasPrefix(line, "taskforge_http_requests_total{") && strings.Contains(line, `code="500"`) {
			labels, value, _ := strings.Cut(line, "} ")
			out[strings.TrimPrefix(labels, "taskforge_http_requests_total{")] = value
		}
	}
	return out
}

// checkOutageAnswers fails the test if the replica answered any request with 500
// (an outage must read as 503 unavailable) or a worker's ack was cut off. Call it
// before stopping the workers: a poll whose client goes away ends in a 500 too (its
// context is cancelled), which is no outage answer and not what this checks.
func checkOutageAnswers(t *testing.T, r *replica, l *ledger) {
	t.Helper()
	if errs := internalErrors(t, r.URL); len(errs) > 0 {
		t.Errorf("the replica answered 500 instead of 503: %v", errs)
		// The error behind each 500 is logged just before its request line.
		if f, ok := r.cmd.Stdout.(*os.File); ok {
			b, _ := os.ReadFile(f.Name())
			lines := strings.Split(string(b), "\n")
			for i, line := range lines {
				if strings.Contains(line, `"status":500`) && i > 0 {
					t.Logf("500 after: %s", lines[i-1])
				}
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for status, n := range l.ackErrors {
		if status != http.StatusServiceUnavailable && status != http.StatusConflict {
			t.Errorf("%d acks got %d; during an outage an ack may get only 503 (or 409 once its lease was reclaimed)", n, status)
		}
	}
}

func pollBody(queue string) map[string]any {
	return map[string]any{"worker_id": "probe", "queues": []string{queue}, "max_tasks": 1}
}

// TestRedisOutage: Redis is SIGKILLed (losing its data) while 4 workers run
// 1,500 tasks through a serve process. While it is down, polls and readyz answer
// 503 unavailable, while enqueues and acks, which need only PostgreSQL, go on. After
// Redis restarts, empty, the same process serves again without a restart and
// every task ends done exactly once.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedisServer(t)
	dbURL := testenv.NewDatabase(t)
	r := startReplica(t, []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + rs.Addr,
		"TASKFORGE_LEASE_TIMEOUT=3s",
		"TASKFORGE_HEARTBEAT_INTERVAL=1s",
		"TASKFORGE_WATCHDOG_INTERVAL=200ms",
		"TASKFORGE_DISPATCH_INTERVAL=100ms",
		"TASKFORGE_LOG_LEVEL=error",
	})
	if resp := testserver.Do(t, r.URL, "POST", "/queues", map[string]any{"name": "q"}, nil); resp.Status != 201 {
		t.Fatalf("create queue: %d %s", resp.Status, resp.Body)
	}
	const n = 1500
	enqueueMany(t, r.URL, "q", n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newLedger()
	wg := runWorkers(ctx, 4, []string{r.URL}, "q", l)
	waitAcked(t, l, 300, 60*time.Second)

	rs.Kill()
	killed := time.Now()
	ackedAtKill := l.acked.Load()
	o := outage{t: t, base: r.URL}
	testserver.Eventually(t, 10*time.Second, "poll answering 503", func() bool {
		_, ok := o.expect(503, "POST", "/workers/poll", pollBody("q"))
		return ok
	})
	firstRefusal := time.Since(killed)
	extra := 0
	rounds := o.probe(2*time.Second, func() (bad []string) {
		if rep, ok := o.expect(503, "POST", "/workers/poll", pollBody("q")); !ok {
			bad = append(bad, "poll: "+rep.String())
		}
		if rep, ok := o.expect(503, "GET", "/readyz", nil); !ok {
			bad = append(bad, "readyz: "+rep.String())
		}
		// Enqueue needs only PostgreSQL: the task is durable and runs once Redis is back.
		if rep, ok := o.expect(201, "POST", "/queues/q/tasks", map[string]any{"payload": "during the outage"}); !ok {
			bad = append(bad, "enqueue: "+rep.String())
		} else {
			extra++
		}
		return bad
	})
	ackedDuringOutage := l.acked.Load() - ackedAtKill

	rs.Restart(t)
	restarted := time.Now()
	testserver.Eventually(t, 30*time.Second, "readyz 200 after the restart", func() bool {
		return send("GET", r.URL+"/readyz", nil, 5*time.Second).status == 200
	})
	ready := time.Since(restarted)
	ackedAtRestart := l.acked.Load()
	testserver.Eventually(t, 30*time.Second, "acks after the restart", func() bool { return l.acked.Load() > ackedAtRestart })
	flowing := time.Since(restarted)
	waitAcked(t, l, int64(n+extra), 90*time.Second)
	allDone := time.Since(restarted)
	checkOutageAnswers(t, r, l)
	cancel()
	wg.Wait()

	t.Logf("Redis killed after %d of %d acks; first 503 after %s; %d probe rounds over 2 s all 503 (enqueue 201); "+
		"%d acks went through while Redis was down; after the restart: readyz 200 in %s, tasks flowing in %s, all %d done in %s; refused acks: %v",
		ackedAtKill, n, firstRefusal.Round(time.Millisecond), rounds, ackedDuringOutage, ready.Round(time.Millisecond),
		flowing.Round(time.Millisecond), n+extra, allDone.Round(time.Millisecond), l.ackErrors)
	if ackedAtKill >= n {
		t.Fatal("every task was done before the outage began; the test proved nothing")
	}
	if syscall.Kill(r.cmd.Process.Pid, 0) != nil {
		t.Error("the serve process is gone")
	}
	verifyAllDoneOnce(t, dbURL, "q", n+extra)
}

// TestPostgresOutage: PostgreSQL is SIGKILLed (with its backends, like a power cut)
// while 4 workers run 1,500 tasks through a serve process. While it is down,
// enqueue, poll and readyz answer 503 unavailable. After it restarts (crash
// recovery), the same process serves again without a restart, and every task,
// including those whose ids a failed poll had taken from the Redis buffer, ends
// done exactly once.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgresServer(t)
	dbURL := pg.URL("postgres")
	r := startReplica(t, []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + testenv.RedisAddr(t),
		"TASKFORGE_REDIS_PREFIX=" + testenv.RedisPrefix(t),
		"TASKFORGE_LEASE_TIMEOUT=3s",
		"TASKFORGE_HEARTBEAT_INTERVAL=1s",
		"TASKFORGE_WATCHDOG_INTERVAL=200ms",
		"TASKFORGE_DISPATCH_INTERVAL=100ms",
		"TASKFORGE_LOG_LEVEL=error",
	})
	for _, q := range []string{"q", "probe"} {
		if resp := testserver.Do(t, r.URL, "POST", "/queues", map[string]any{"name": q}, nil); resp.Status != 201 {
			t.Fatalf("create queue %s: %d %s", q, resp.Status, resp.Body)
		}
	}
	// The probe queue has buffered tasks that no worker takes: a poll on it must
	// reach PostgreSQL to claim one, whatever the workers left in their buffer.
	const n, probes = 1500, 200
	enqueueMany(t, r.URL, "probe", probes)
	observer, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 30*time.Second, "probe tasks buffered", func() bool {
		var claimed int
		_ = observer.QueryRow(context.Background(), `SELECT count(*) FROM tasks WHERE queue = 'probe' AND status = 'claimed'`).Scan(&claimed)
		return claimed == probes
	})
	observer.Close(context.Background())
	enqueueMany(t, r.URL, "q", n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newLedger()
	wg := runWorkers(ctx, 4, []string{r.URL}, "q", l)
	waitAcked(t, l, 300, 60*time.Second)

	if err := pg.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ackedAtKill := l.acked.Load()
	o := outage{t: t, base: r.URL}
	testserver.Eventually(t, 10*time.Second, "enqueue answering 503", func() bool {
		_, ok := o.expect(503, "POST", "/queues/q/tasks", map[string]any{"payload": 1})
		return ok
	})
	firstRefusal := time.Since(killed)
	rounds := o.probe(2*time.Second, func() (bad []string) {
		if rep, ok := o.expect(503, "POST", "/queues/q/tasks", map[string]any{"payload": 1}); !ok {
			bad = append(bad, "enqueue: "+rep.String())
		}
		if rep, ok := o.expect(503, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": []any{map[string]any{"payload": 1}}}); !ok {
			bad = append(bad, "batch enqueue: "+rep.String())
		}
		if rep, ok := o.expect(503, "POST", "/workers/poll", pollBody("probe")); !ok {
			bad = append(bad, "poll: "+rep.String())
		}
		if rep, ok := o.expect(503, "GET", "/readyz", nil); !ok {
			bad = append(bad, "readyz: "+rep.String())
		}
		return bad
	})
	if rounds*2 > probes { // each round may lose one probe id until the repair pass
		t.Fatalf("%d probe rounds for %d probe tasks", rounds, probes)
	}

	restartCtx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	restartStart := time.Now()
	if err := pg.Restart(restartCtx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	pgRestart := restarted.Sub(restartStart)
	testserver.Eventually(t, 30*time.Second, "readyz 200 after the restart", func() bool {
		return send("GET", r.URL+"/readyz", nil, 5*time.Second).status == 200
	})
	ready := time.Since(restarted)
	testserver.Eventually(t, 30*time.Second, "enqueue 201 after the restart", func() bool {
		return send("POST", r.URL+"/queues/q/tasks", map[string]any{"payload": "after"}, 5*time.Second).status == 201
	})
	enqueueBack := time.Since(restarted)
	ackedAtRestart := l.acked.Load()
	testserver.Eventually(t, 30*time.Second, "acks after the restart", func() bool { return l.acked.Load() > ackedAtRestart })
	flowing := time.Since(restarted)
	// An enqueue whose answer was lost may have committed: count in PostgreSQL.
	observer, err = pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close(context.Background())
	var total int
	testserver.Eventually(t, 90*time.Second, "every task of q done", func() bool {
		var open int
		_ = observer.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE status <> 'done'), count(*)
			FROM all_tasks WHERE queue = 'q'`).Scan(&open, &total)
		return total > 0 && open == 0
	})
	allDone := time.Since(restarted)
	checkOutageAnswers(t, r, l)
	cancel()
	wg.Wait()
	if total < n+1 {
		t.Errorf("queue q holds %d tasks, want at least %d", total, n+1)
	}

	// Every probe task comes back, including those whose ids failed polls popped
	// from the buffer: the repair pass re-adds them.
	probeLedger := newLedger()
	pctx, pcancel := context.WithCancel(context.Background())
	pwg := runWorkers(pctx, 2, []string{r.URL}, "probe", probeLedger)
	waitAcked(t, probeLedger, probes, 60*time.Second)
	pcancel()
	pwg.Wait()

	t.Logf("PostgreSQL killed after %d of %d acks; first 503 after %s; %d probe rounds over 2 s all 503; "+
		"PostgreSQL restart took %s; then readyz 200 in %s, enqueue 201 in %s, tasks flowing in %s, all done in %s; refused acks: %v",
		ackedAtKill, n, firstRefusal.Round(time.Millisecond), rounds, pgRestart.Round(time.Millisecond),
		ready.Round(time.Millisecond), enqueueBack.Round(time.Millisecond), flowing.Round(time.Millisecond),
		allDone.Round(time.Millisecond), l.ackErrors)
	if ackedAtKill >= n {
		t.Fatal("every task was done before the outage began; the test proved nothing")
	}
	if syscall.Kill(r.cmd.Process.Pid, 0) != nil {
		t.Error("the serve process is gone")
	}
	verifyAllDoneOnce(t, dbURL, "q", total)

	verifyAllDoneOnce(t, dbURL, "probe", probes)
}
