package api_test

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskforge/taskforge/api"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

// signalWait bounds how long a test waits for a signal before failing: a guard
// against a hang, never a pause.
const signalWait = 30 * time.Second

// hangTimeout is the commit timeout of the tests whose statement hangs on a row
// lock until it passes. The timed-out connection is dropped, so the request after
// the lock is released may open a fresh one (connect, session settings, prepare)
// within it; 500 ms was too little for that on a loaded CI machine.
const hangTimeout = 2 * time.Second

// commitReplica starts a replica with the given group commit settings (zero keeps
// the default) and a long lease, and gives n tasks of queue q executing for worker
// "w", in enqueue order.
func commitReplica(t *testing.T, opts testserver.Options, timeout time.Duration, maxWaiting, n int) (*testserver.Instance, []testserver.Polled) {
	t.Helper()
	opts.Configure = func(c *server.Config) {
		c.LeaseTimeout = time.Minute
		c.CommitTimeout = timeout
		c.CommitMaxWaiting = maxWaiting
	}
	s := testserver.Start(t, opts)
	s.CreateQueue("q", nil)
	for i := range n {
		s.Enqueue("q", map[string]any{"payload": i})
	}
	var got []testserver.Polled
	for len(got) < n {
		got = append(got, s.Poll("w", []string{"q"}, min(n-len(got), 100), 2000)...)
	}
	return s, got
}

// lockTask takes the row lock of task id in a transaction of its own, so that any
// statement updating the task blocks (PostgreSQL hangs, for that row). The returned
// function rolls the transaction back.
func lockTask(t *testing.T, dbURL, id string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	conn := dbConn(t, dbURL)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var locked string
	if err := tx.QueryRow(ctx, `SELECT id::text FROM tasks WHERE id = $1 FOR UPDATE`, id).Scan(&locked); err != nil {
		t.Fatalf("lock task %s: %v", id, err)
	}
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			if err := tx.Rollback(ctx); err != nil {
				t.Errorf("unlock task %s: %v", id, err)
			}
		})
	}
	t.Cleanup(unlock)
	return unlock
}

// waitLockWaitersGone waits until no backend of the test's database waits for a
// lock: a statement that timed out was cancelled, not left to run once the lock goes.
func waitLockWaitersGone(t *testing.T, dbURL string) {
	t.Helper()
	conn := dbConn(t, dbURL)
	testserver.Eventually(t, signalWait, "the timed-out statement cancelled", func() bool {
		var n int
		err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n == 0
	})
}

// ackAsync acks p in the background; its response arrives on the channel.
func ackAsync(s *testserver.Instance, p testserver.Polled) <-chan testserver.Response {
	ch := make(chan testserver.Response, 1)
	go func() { ch <- s.Ack("w", p) }()
	return ch
}

// recv returns what ch delivers, failing the test if nothing comes.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(signalWait):
		t.Fatalf("no %s within %s", what, signalWait)
		var zero T
		return zero
	}
}

// await waits in a hook for ch to close; it reports a hang rather than block the
// replica for ever.
func await(t *testing.T, ch <-chan struct{}, what string) {
	select {
	case <-ch:
	case <-time.After(signalWait):
		t.Errorf("hook: no %s within %s", what, signalWait)
	}
}

// wantUnavailable fails unless resp is a 503 unavailable whose message says msg.
func wantUnavailable(t *testing.T, what string, resp testserver.Response, msg string) {
	t.Helper()
	if resp.Status != 503 || resp.ErrorCode(t) != "unavailable" || !bytes.Contains(resp.Body, []byte(msg)) {
		t.Fatalf("%s: %d %s, want 503 unavailable saying %q", what, resp.Status, resp.Body, msg)
	}
}

// commitFailures reads taskforge_group_commit_failures_total for commit and reason.
func commitFailures(t *testing.T, s *testserver.Instance, commit, reason string) int {
	t.Helper()
	body := s.Must(200, "GET", "/metrics", nil).Body
	prefix := `taskforge_group_commit_failures_total{commit="` + commit + `",reason="` + reason + `"} `
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("metric %s%s: %v", prefix, v, err)
			}
			return n
		}
	}
	return 0
}

// TestGroupCommitTimesOutWhenPostgresHangs: acks whose shared statement blocks on a
// row lock get 503 once the commit timeout passes, though the lock is still held;
// the ack committed before them is unaffected, and once the lock is gone acks
// commit again. The statement that timed out is cancelled (pgx asks PostgreSQL to),
// so it leaves nothing behind and the acks can be repeated.
func TestGroupCommitTimesOutWhenPostgresHangs(t *testing.T) {
	t.Parallel()
	s, ps := commitReplica(t, testserver.Options{}, hangTimeout, 0, 4)
	hung, other, first, later := ps[0], ps[1], ps[2], ps[3]
	unlock := lockTask(t, s.Config.DatabaseURL, hung.ID)

	firstTry := make(chan struct{})
	twoQueued := make(chan struct{})
	var queuedOnce sync.Once
	var tries atomic.Int32
	batches := make(chan int, 16) // sizes of the tries after the first
	api.SetAckCommitHooks(s.Server.API, api.CommitHooks{
		Queued: func(waiting int) {
			if waiting == 2 {
				queuedOnce.Do(func() { close(twoQueued) })
			}
		},
		Try: func(_ context.Context, items int) {
			if tries.Add(1) == 1 {
				close(firstTry)
				await(t, twoQueued, "second and third ack queued")
				return
			}
			batches <- items
		},
	})

	firstResp := ackAsync(s, first)
	recv(t, firstTry, "first try")
	hungResp, otherResp := ackAsync(s, hung), ackAsync(s, other) // both join the next batch

	if r := recv(t, firstResp, "answer to the first ack"); r.Status != 200 {
		t.Fatalf("first ack: %d %s", r.Status, r.Body)
	}
	wantUnavailable(t, "ack of the locked task", recv(t, hungResp, "answer to the hung ack"), "did not finish the commit in time")
	wantUnavailable(t, "ack sharing its batch", recv(t, otherResp, "answer to the other ack"), "did not finish the commit in time")
	if n := recv(t, batches, "size of the hung batch"); n != 2 {
		t.Fatalf("the hung batch held %d acks, want both", n)
	}
	if len(batches) != 0 || tries.Load() != 2 {
		t.Fatalf("%d tries, want 2: a timed-out try is not retried", tries.Load())
	}
	if n := commitFailures(t, s, "ack", "timeout"); n != 1 {
		t.Fatalf("timeouts counted: %d, want 1", n)
	}

	waitLockWaitersGone(t, s.Config.DatabaseURL)
	unlock()
	if r := s.Ack("w", later); r.Status != 200 {
		t.Fatalf("ack after the lock was released: %d %s", r.Status, r.Body)
	}
	for _, p := range []testserver.Polled{hung, other} {
		if r := s.Ack("w", p); r.Status != 200 {
			t.Fatalf("repeated ack of %s: %d %s", p.ID, r.Status, r.Body)
		}
		if task := s.Task("q", p.ID); task.Status != "done" || len(task.AttemptHistory) != 1 || task.AttemptHistory[0].Status != "succeeded" {
			t.Fatalf("task %s after its repeated ack: %s, history %+v", p.ID, task.Status, task.AttemptHistory)
		}
	}
}

// TestGroupCommitClaimTimesOutWhenPostgresHangs: a poll whose claim blocks on a row
// lock gets 503 at the commit timeout, gives its ids back to the buffer, and the
// next poll after the lock is gone gets the task.
func TestGroupCommitClaimTimesOutWhenPostgresHangs(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) { c.CommitTimeout = hangTimeout }})
	s.CreateQueue("q", nil)
	task := s.Enqueue("q", map[string]any{"payload": 1})
	s.Signals.DispatchPass.WaitUntil(t, "the dispatcher's pass that buffers the task", func() bool { return s.Task("q", task.ID).Status == "claimed" })
	unlock := lockTask(t, s.Config.DatabaseURL, task.ID)
	r := s.Do("POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"q"}, "max_tasks": 1, "wait_ms": 0})
	wantUnavailable(t, "poll whose claim hangs", r, "did not finish the commit in time")
	if n := commitFailures(t, s, "claim", "timeout"); n != 1 {
		t.Fatalf("claim timeouts counted: %d, want 1", n)
	}
	waitLockWaitersGone(t, s.Config.DatabaseURL)
	unlock()
	if got := s.Poll("w", []string{"q"}, 1, 5000); len(got) != 1 || got[0].ID != task.ID || got[0].Attempt != 1 {
		t.Fatalf("poll after the lock was released: %+v, want the task's first attempt", got)
	}
}

// TestGroupCommitFailsFastWhenPostgresIsDown: with PostgreSQL killed, an ack gets 503
// at once (connections are refused), not after the commit timeout; once PostgreSQL
// is back, acks commit again without a restart of the replica.
func TestGroupCommitFailsFastWhenPostgresIsDown(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgresServer(t)
	const timeout = time.Minute
	s, ps := commitReplica(t, testserver.Options{DatabaseURL: pg.URL("postgres")}, timeout, 0, 2)
	if err := pg.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wantUnavailable(t, "ack with PostgreSQL down", s.Ack("w", ps[0]), "unavailable")
	if took := time.Since(start); took > timeout/2 {
		t.Fatalf("the ack took %s to fail: it waited for the commit timeout (%s)", took, timeout)
	}

	ctx, cancel := context.WithTimeout(context.Background(), signalWait)
	defer cancel()
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, signalWait, "readyz answering 200", func() bool { return s.Do("GET", "/readyz", nil).Status == 200 })
	if r := s.Ack("w", ps[1]); r.Status != 200 {
		t.Fatalf("ack once PostgreSQL is back: %d %s", r.Status, r.Body)
	}
	if r := s.Ack("w", ps[0]); r.Status != 200 {
		t.Fatalf("repeat of the ack that failed (it never reached PostgreSQL): %d %s", r.Status, r.Body)
	}
}

// TestGroupCommitPanicFailsOnlyItsBatch: a panic inside a batch answers its ack 500
// and changes nothing; the ack queued behind it commits, and so do later ones.
func TestGroupCommitPanicFailsOnlyItsBatch(t *testing.T) {
	t.Parallel()
	s, ps := commitReplica(t, testserver.Options{}, 0, 0, 2)
	doomed, next := ps[0], ps[1]
	firstTry := make(chan struct{})
	nextQueued := make(chan struct{})
	var queuedOnce sync.Once
	var tries atomic.Int32
	api.SetAckCommitHooks(s.Server.API, api.CommitHooks{
		Queued: func(waiting int) {
			if waiting == 1 && tries.Load() == 1 {
				queuedOnce.Do(func() { close(nextQueued) })
			}
		},
		Try: func(_ context.Context, _ int) {
			if tries.Add(1) == 1 {
				close(firstTry)
				await(t, nextQueued, "second ack queued")
				panic("injected by the test")
			}
		},
	})
	doomedResp := ackAsync(s, doomed)
	recv(t, firstTry, "first try")
	nextResp := ackAsync(s, next)

	if r := recv(t, doomedResp, "answer to the panicking batch"); r.Status != 500 || r.ErrorCode(t) != "internal" {
		t.Fatalf("ack whose batch panicked: %d %s, want 500 internal", r.Status, r.Body)
	}
	if r := recv(t, nextResp, "answer to the ack queued behind"); r.Status != 200 {
		t.Fatalf("ack queued behind the panic: %d %s", r.Status, r.Body)
	}
	if st := s.Task("q", doomed.ID).Status; st != "executing" {
		t.Fatalf("the panicking batch changed its task: %s", st)
	}
	if r := s.Ack("w", doomed); r.Status != 200 {
		t.Fatalf("repeat of the ack whose batch panicked: %d %s", r.Status, r.Body)
	}
	if n := commitFailures(t, s, "ack", "panic"); n != 1 {
		t.Fatalf("panics counted: %d, want 1", n)
	}
}

// TestGroupCommitPanicInClaimGivesTheIdsBack: a poll whose claim batch panics gets
// 500, and the ids it popped go back to the buffer, so the next poll gets the task.
func TestGroupCommitPanicInClaimGivesTheIdsBack(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	task := s.Enqueue("q", map[string]any{"payload": 1})
	s.Signals.DispatchPass.WaitUntil(t, "the dispatcher's pass that buffers the task", func() bool { return s.Task("q", task.ID).Status == "claimed" })
	var tries atomic.Int32
	api.SetClaimCommitHooks(s.Server.API, api.CommitHooks{Try: func(context.Context, int) {
		if tries.Add(1) == 1 {
			panic("injected by the test")
		}
	}})
	r := s.Do("POST", "/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"q"}, "max_tasks": 1, "wait_ms": 0})
	if r.Status != 500 || r.ErrorCode(t) != "internal" {
		t.Fatalf("poll whose claim panicked: %d %s, want 500 internal", r.Status, r.Body)
	}
	if got := s.Poll("w", []string{"q"}, 1, 5000); len(got) != 1 || got[0].ID != task.ID {
		t.Fatalf("poll after the panic: %+v, want the task", got)
	}
	if n := commitFailures(t, s, "claim", "panic"); n != 1 {
		t.Fatalf("claim panics counted: %d, want 1", n)
	}
}

// hangAckCommit acks p with its task's row locked, so that the ack's commit hangs,
// and returns once its statement waits for the lock: the ack's answer, a channel
// closed once bound callers wait behind it, and the lock's release.
func hangAckCommit(t *testing.T, s *testserver.Instance, p testserver.Polled, bound int) (hung <-chan testserver.Response, full <-chan struct{}, unlock func()) {
	t.Helper()
	unlock = lockTask(t, s.Config.DatabaseURL, p.ID)
	firstTry := make(chan struct{})
	queueFull := make(chan struct{})
	var once sync.Once
	var tries atomic.Int32
	api.SetAckCommitHooks(s.Server.API, api.CommitHooks{
		Queued: func(waiting int) {
			if waiting == bound {
				once.Do(func() { close(queueFull) })
			}
		},
		Try: func(context.Context, int) {
			if tries.Add(1) == 1 {
				close(firstTry)
			}
		},
	})
	hung = ackAsync(s, p)
	recv(t, firstTry, "first try") // its statement now waits for the lock
	return hung, queueFull, unlock
}

// TestGroupCommitQueueIsBounded: while a commit hangs on a row lock, acks queue up
// to CommitMaxWaiting; the next gets 503 at once, and once the lock is released the
// queued ones commit and the refused one can be repeated.
func TestGroupCommitQueueIsBounded(t *testing.T) {
	t.Parallel()
	s, ps := commitReplica(t, testserver.Options{}, time.Minute, 2, 4)
	hung, full, unlock := hangAckCommit(t, s, ps[0], 2)
	queued := []<-chan testserver.Response{ackAsync(s, ps[1]), ackAsync(s, ps[2])}
	recv(t, full, "queue full")

	wantUnavailable(t, "ack past the bound", s.Ack("w", ps[3]), "too many requests are waiting")
	if n := commitFailures(t, s, "ack", "overload"); n != 1 {
		t.Fatalf("overloads counted: %d, want 1", n)
	}
	unlock()
	for i, ch := range append([]<-chan testserver.Response{hung}, queued...) {
		if r := recv(t, ch, "answer to a queued ack"); r.Status != 200 {
			t.Fatalf("ack %d: %d %s", i, r.Status, r.Body)
		}
	}
	if r := s.Ack("w", ps[3]); r.Status != 200 {
		t.Fatalf("repeat of the refused ack: %d %s", r.Status, r.Body)
	}
}

// TestGroupCommitBoundCountsRequests: the bound counts requests, not acks: behind a
// hung commit, two batch acks of five tasks each fit a bound of two, and the next
// request of any size gets 503 at once.
func TestGroupCommitBoundCountsRequests(t *testing.T) {
	t.Parallel()
	s, ps := commitReplica(t, testserver.Options{}, time.Minute, 2, 12)
	hung, full, unlock := hangAckCommit(t, s, ps[0], 2)
	batchAsync := func(tasks []testserver.Polled) <-chan testserver.Response {
		acks := make([]map[string]any, len(tasks))
		for i, p := range tasks {
			acks[i] = map[string]any{"task_id": p.ID, "lease_token": p.LeaseToken}
		}
		ch := make(chan testserver.Response, 1)
		go func() { ch <- s.Do("POST", "/workers/ack/batch", map[string]any{"worker_id": "w", "acks": acks}) }()
		return ch
	}
	batches := []<-chan testserver.Response{batchAsync(ps[1:6]), batchAsync(ps[6:11])}
	recv(t, full, "two batch acks queued")
	wantUnavailable(t, "ack past the bound", s.Ack("w", ps[11]), "too many requests are waiting")
	unlock()
	if r := recv(t, hung, "the hung ack's answer"); r.Status != 200 {
		t.Fatalf("hung ack: %d %s", r.Status, r.Body)
	}
	for i, ch := range batches {
		if r := recv(t, ch, "a queued batch's answer"); r.Status != 200 || bytes.Contains(r.Body, []byte(`"error"`)) {
			t.Fatalf("batch %d: %d %s", i, r.Status, r.Body)
		}
	}
}

// TestGroupCommitLeaderHandsOff: a request that committed the queue answers once
// its own batch is done, while the batch behind it (blocked on a row lock) is still
// running on another request's goroutine.
func TestGroupCommitLeaderHandsOff(t *testing.T) {
	t.Parallel()
	s, ps := commitReplica(t, testserver.Options{}, time.Minute, 0, 2)
	leader, behind := ps[0], ps[1]
	unlock := lockTask(t, s.Config.DatabaseURL, behind.ID)
	firstTry, secondTry := make(chan struct{}), make(chan struct{})
	queued := make(chan struct{})
	var once sync.Once
	var tries atomic.Int32
	api.SetAckCommitHooks(s.Server.API, api.CommitHooks{
		Queued: func(waiting int) {
			if tries.Load() == 1 {
				once.Do(func() { close(queued) })
			}
		},
		Try: func(context.Context, int) {
			switch tries.Add(1) {
			case 1:
				close(firstTry)
				await(t, queued, "second ack queued")
			case 2:
				close(secondTry)
			}
		},
	})
	leaderResp := ackAsync(s, leader)
	recv(t, firstTry, "first try")
	behindResp := ackAsync(s, behind)
	recv(t, secondTry, "second batch started")
	if r := recv(t, leaderResp, "the leader's answer while the next batch hangs"); r.Status != 200 {
		t.Fatalf("leader's ack: %d %s", r.Status, r.Body)
	}
	select {
	case r := <-behindResp:
		t.Fatalf("the ack behind a row lock answered %d %s before the lock was released", r.Status, r.Body)
	default:
	}
	unlock()
	if r := recv(t, behindResp, "answer once the lock is released"); r.Status != 200 {
		t.Fatalf("ack behind the lock: %d %s", r.Status, r.Body)
	}
}

// TestGroupCommitUnderConcurrentPanics: streams of concurrent acks while every third batch
// panics: every ack is answered (200, or 500 for a batch that panicked), the queue
// keeps passing between requests, and each failed ack succeeds when repeated.
func TestGroupCommitUnderConcurrentPanics(t *testing.T) {
	t.Parallel()
	const n = 120
	s, ps := commitReplica(t, testserver.Options{}, 0, 0, n)
	var tries atomic.Int32
	api.SetAckCommitHooks(s.Server.API, api.CommitHooks{Try: func(context.Context, int) {
		if tries.Add(1)%3 == 0 {
			panic("injected by the test")
		}
	}})
	codes := make([]int, n)
	var wg sync.WaitGroup
	const senders = 8 // each acks its share one after the other: many small batches
	for k := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; i < n; i += senders {
				codes[i] = s.Ack("w", ps[i]).Status
			}
		}()
	}
	wg.Wait()
	api.SetAckCommitHooks(s.Server.API, api.CommitHooks{})
	failed := 0
	for i, code := range codes {
		switch code {
		case 200:
		case 500:
			failed++
			if r := s.Ack("w", ps[i]); r.Status != 200 {
				t.Fatalf("repeat of ack %d after its batch panicked: %d %s", i, r.Status, r.Body)
			}
		default:
			t.Fatalf("ack %d: status %d", i, code)
		}
	}
	t.Logf("%d tries, %d acks failed by a panic", tries.Load(), failed)
	if panics := commitFailures(t, s, "ack", "panic"); panics != int(tries.Load())/3 || (panics > 0) != (failed > 0) {
		t.Fatalf("panics counted: %d for %d tries and %d failed acks", panics, tries.Load(), failed)
	}
}
