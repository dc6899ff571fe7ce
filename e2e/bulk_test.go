package e2e_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testsignal"
)

// bulkTasks is the size of the bulk operations below: TASKFORGE_E2E_BULK_TASKS, or
// 20,000 (about 20 batches, seconds) in `make test`. docs/benchmarks.md records runs
// with 1,000,000.
func bulkTasks(t *testing.T) int {
	t.Helper()
	v := os.Getenv("TASKFORGE_E2E_BULK_TASKS")
	if v == "" {
		return 20_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("TASKFORGE_E2E_BULK_TASKS=%q: want a positive integer", v)
	}
	return n
}

// TestBulkOperationsLeaveOtherQueuesAlone loads N pending tasks into one queue and
// N dead tasks into another (plain INSERTs, so that the tally triggers fire), then,
// while a producer-worker loop enqueues, polls and acks one task at a time on a third
// queue, cancels the first queue by status and discards the second's dead-letter
// queue through a `taskforge serve` process. It checks that every task was cancelled
// or discarded, that the kept counts are exact, and that the other queue's
// operations kept working; it logs their latency before, during and after each bulk
// operation, with what PostgreSQL's backends were waiting on during the slowest.
func TestBulkOperationsLeaveOtherQueuesAlone(t *testing.T) {
	n := bulkTasks(t)
	if n < 100_000 {
		t.Parallel() // a million-row run wants the box to itself
	}
	dbURL := testenv.NewDatabase(t)
	r := startReplica(t, []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + testenv.RedisAddr(t),
		"TASKFORGE_REDIS_PREFIX=" + testenv.RedisPrefix(t),
		"TASKFORGE_LOG_LEVEL=warn",
	})
	api, err := client.New(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, q := range []string{"bulk", "dead", "live"} {
		if _, err := api.CreateQueue(ctx, q, client.QueueSettings{}); err != nil {
			t.Fatalf("create queue %s: %v", q, err)
		}
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	start := time.Now()
	loadBulkTasks(t, pool, "bulk", "pending", n)
	loadBulkTasks(t, pool, "dead", "dead", n)
	for _, table := range []string{"tasks", "attempts"} {
		if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+table); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("loaded %d pending and %d dead tasks (with an attempt each) in %s; load average %s",
		n, n, time.Since(start).Round(time.Millisecond), loadAverage())

	// Windows before and after each bulk operation as long as the operation itself, at
	// this size, so that their worst cases compare: TASKFORGE_E2E_BULK_BASELINE.
	var baseline time.Duration
	if v := os.Getenv("TASKFORGE_E2E_BULK_BASELINE"); v != "" {
		if baseline, err = time.ParseDuration(v); err != nil {
			t.Fatalf("TASKFORGE_E2E_BULK_BASELINE=%q: %v", v, err)
		}
	}
	p := startLiveLoop(t, api, "live")
	s := startActivitySampler(t, pool)

	cancel := p.phase(pool, baseline, "bulk cancel", func() (string, error) {
		res, err := api.CancelByStatus(ctx, "bulk", client.StatusPending)
		if err == nil && res.Cancelled != n {
			err = fmt.Errorf("cancelled %d tasks, want %d", res.Cancelled, n)
		}
		return fmt.Sprintf("cancelled %d", res.Cancelled), err
	})
	discard := p.phase(pool, baseline, "bulk discard", func() (string, error) {
		got, err := api.DiscardAllDead(ctx, "dead")
		if err == nil && got != n {
			err = fmt.Errorf("discarded %d tasks, want %d", got, n)
		}
		return fmt.Sprintf("discarded %d", got), err
	})
	p.stop()
	s.stop()

	for _, ph := range []*bulkPhase{cancel, discard} {
		if ph.err != nil {
			t.Errorf("%s: %v", ph.name, ph.err)
		}
		t.Logf("%s of %d tasks: %s in %s", ph.name, n, ph.outcome, ph.end.Sub(ph.start).Round(time.Millisecond))
		p.report(t, ph, s)
	}
	if p.errs > 0 {
		t.Errorf("the other queue's loop failed %d times; first: %v", p.errs, p.firstErr)
	}

	st, err := api.Stats(ctx, "bulk")
	if err != nil {
		t.Fatal(err)
	}
	if st.Depth["pending"] != 0 || st.Depth["claimed"] != 0 || st.Depth["cancelled"] != int64(n) {
		t.Errorf("kept counts of bulk after the cancel: %v, want cancelled %d and nothing pending", st.Depth, n)
	}
	if st, err = api.Stats(ctx, "dead"); err != nil {
		t.Fatal(err)
	}
	if st.DLQDepth != 0 {
		t.Errorf("dlq_depth of dead after the discard: %d", st.DLQDepth)
	}
	var left, attempts int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM all_tasks WHERE queue = 'dead'),
		(SELECT count(*) FROM all_attempts WHERE queue = 'dead')`).Scan(&left, &attempts); err != nil {
		t.Fatal(err)
	}
	if left != 0 || attempts != 0 {
		t.Errorf("after the discard: %d tasks and %d attempts left in dead", left, attempts)
	}
}

// loadBulkTasks inserts n tasks of status into queue, 50,000 per statement, created
// a microsecond apart; dead tasks get one failed attempt each, as a task with no
// retries has.
func loadBulkTasks(t *testing.T, pool *pgxpool.Pool, queue, status string, n int) {
	t.Helper()
	ctx := context.Background()
	const chunk = 50_000
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n) - 1
		_, err := pool.Exec(ctx, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at,
				max_retries, attempts, created_at, updated_at, finished_at, last_error)
			SELECT gen_random_uuid(), $1, jsonb_build_object('i', g), 5, $2, ts, 0,
				CASE WHEN $2 = 'dead' THEN 1 ELSE 0 END, ts, ts,
				CASE WHEN $2 = 'dead' THEN ts END, CASE WHEN $2 = 'dead' THEN 'boom' END
			FROM generate_series($3::int, $4::int) AS g,
				LATERAL (SELECT now() - interval '1 hour' + g * interval '1 microsecond' AS ts) AS x`,
			queue, status, lo, hi)
		if err != nil {
			t.Fatalf("load %s tasks %d-%d: %v", status, lo, hi, err)
		}
		if status == "dead" {
			_, err = pool.Exec(ctx, `INSERT INTO attempts (task_id, attempt, queue, worker_id, lease_token, status,
					started_at, finished_at, error)
				SELECT id, 1, queue, 'w', gen_random_uuid(), 'failed', created_at, finished_at, 'boom'
				FROM tasks WHERE queue = $1 AND status = 'dead' AND attempts = 1
					AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = tasks.id)`, queue)
			if err != nil {
				t.Fatalf("load attempts of dead tasks %d-%d: %v", lo, hi, err)
			}
		}
	}
}

// liveOp is one call of the live loop.
type liveOp struct {
	kind       string // enqueue, poll, ack
	start, end time.Time
}

// liveLoop enqueues, polls and acks one task at a time on its queue until stopped,
// timing every call.
type liveLoop struct {
	t        *testing.T
	api      *client.Client
	queue    string
	done     chan struct{}
	stopped  chan struct{}
	mu       sync.Mutex
	ops      []liveOp
	cycles   int
	cycled   testsignal.Signal[int] // every full cycle, with the count so far
	errs     int
	firstErr error
}

func startLiveLoop(t *testing.T, api *client.Client, queue string) *liveLoop {
	l := &liveLoop{t: t, api: api, queue: queue, done: make(chan struct{}), stopped: make(chan struct{})}
	l.cycled.Init()
	go l.run()
	return l
}

func (l *liveLoop) run() {
	defer close(l.stopped)
	ctx := context.Background()
	timed := func(kind string, f func() error) error {
		start := time.Now()
		err := f()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ops = append(l.ops, liveOp{kind: kind, start: start, end: time.Now()})
		if err != nil {
			l.errs++
			if l.firstErr == nil {
				l.firstErr = fmt.Errorf("%s: %w", kind, err)
			}
		}
		return err
	}
	for i := 0; ; i++ {
		select {
		case <-l.done:
			return
		default:
		}
		var task *client.Task
		if timed("enqueue", func() (err error) {
			task, err = l.api.Enqueue(ctx, l.queue, client.NewTask{Payload: map[string]any{"i": i}})
			return err
		}) != nil {
			continue
		}
		var got *client.PollResult
		if timed("poll", func() (err error) {
			got, err = l.api.Poll(ctx, client.PollRequest{WorkerID: "live", Queues: []string{l.queue}, Wait: 10 * time.Second})
			if err == nil && (len(got.Tasks) != 1 || got.Tasks[0].ID != task.ID) {
				err = fmt.Errorf("polled %d tasks for %s", len(got.Tasks), task.ID)
			}
			return err
		}) != nil {
			continue
		}
		if timed("ack", func() error {
			_, err := l.api.Ack(ctx, "live", got.Tasks[0].ID, got.Tasks[0].LeaseToken, nil)
			return err
		}) == nil {
			l.mu.Lock()
			l.cycles++
			n := l.cycles
			l.mu.Unlock()
			l.cycled.Signal(n)
		}
	}
}

// waitCycles waits for n more full cycles of the loop, each within
// testsignal.Timeout.
func (l *liveLoop) waitCycles(n int) {
	l.mu.Lock()
	want := l.cycles + n
	l.mu.Unlock()
	for c := 0; c < want; { // older cycles still unread count less than want
		c = l.cycled.WaitOrTimeout(l.t, fmt.Sprintf("cycle %d of the live loop", c+1))
	}
}

// cyclesUntil waits for cycles of the loop until one ends at or after end: a
// window of at least a given length is made of whole cycles, each one measured.
func (l *liveLoop) cyclesUntil(end time.Time) {
	for time.Now().Before(end) {
		l.waitCycles(1)
	}
}

func (l *liveLoop) stop() {
	close(l.done)
	<-l.stopped
}

// bulkPhase is one bulk operation and the loop's cycles around it.
type bulkPhase struct {
	name       string
	before     time.Time // the baseline's start
	start, end time.Time // the bulk operation's
	after      time.Time // the end of the cycles after it
	outcome    string
	err        error
	wal        [4]walStats // at before, start, end and after
}

// walStats is the PostgreSQL server's WAL and checkpoint counters (the whole
// server's: other databases' work counts too).
type walStats struct {
	bytes, fpi, buffersFull, syncs, forcedCheckpoints int64
}

func readWAL(pool *pgxpool.Pool) walStats {
	var w walStats
	_ = pool.QueryRow(context.Background(), `SELECT wal_bytes::bigint, wal_fpi, wal_buffers_full, wal_sync,
		(SELECT checkpoints_req FROM pg_stat_bgwriter) FROM pg_stat_wal`).Scan(&w.bytes, &w.fpi, &w.buffersFull, &w.syncs,
		&w.forcedCheckpoints)
	return w
}

// phase runs the loop for a baseline of 200 cycles and at least baseline, then op,
// then 100 cycles more and at least half of baseline.
func (l *liveLoop) phase(pool *pgxpool.Pool, baseline time.Duration, name string, op func() (string, error)) *bulkPhase {
	ph := &bulkPhase{name: name, before: time.Now()}
	ph.wal[0] = readWAL(pool)
	l.waitCycles(200)
	l.cyclesUntil(ph.before.Add(baseline))
	ph.start = time.Now()
	ph.wal[1] = readWAL(pool)
	ph.outcome, ph.err = op()
	ph.end = time.Now()
	ph.wal[2] = readWAL(pool)
	l.waitCycles(100)
	l.cyclesUntil(ph.end.Add(baseline / 2))
	ph.after = time.Now()
	ph.wal[3] = readWAL(pool)
	return ph
}

// report logs the loop's latency in the three windows of ph and what PostgreSQL's
// backends were doing during the slowest calls of the middle one.
func (l *liveLoop) report(t *testing.T, ph *bulkPhase, s *activitySampler) {
	l.mu.Lock()
	ops := slices.Clone(l.ops)
	l.mu.Unlock()
	windows := []struct {
		name     string
		from, to time.Time
	}{{"before", ph.before, ph.start}, {"during", ph.start, ph.end}, {"after", ph.end, ph.after}}
	for i, w := range windows {
		var b strings.Builder
		for _, kind := range []string{"enqueue", "poll", "ack"} {
			var d []time.Duration
			for _, o := range ops {
				if o.kind == kind && !o.start.Before(w.from) && o.start.Before(w.to) {
					d = append(d, o.end.Sub(o.start))
				}
			}
			slices.Sort(d)
			if len(d) == 0 {
				continue
			}
			fmt.Fprintf(&b, "  %-7s n=%-6d p50 %6.1f  p99 %7.1f  max %7.1f ms", kind, len(d),
				ms(pctDur(d, 50)), ms(pctDur(d, 99)), ms(d[len(d)-1]))
		}
		a, z := ph.wal[i], ph.wal[i+1]
		secs := w.to.Sub(w.from).Seconds()
		t.Logf("%s, %s (%.1f s):%s\n  server WAL %.1f MB/s, %.0f full-page images/s, %d times WAL buffers full, %d syncs, %d forced checkpoints",
			ph.name, w.name, secs, b.String(), float64(z.bytes-a.bytes)/secs/1e6, float64(z.fpi-a.fpi)/secs,
			z.buffersFull-a.buffersFull, z.syncs-a.syncs, z.forcedCheckpoints-a.forcedCheckpoints)
	}
	for _, w := range windows[1:] {
		var slow []liveOp
		for _, o := range ops {
			if !o.start.Before(w.from) && o.start.Before(w.to) {
				slow = append(slow, o)
			}
		}
		slices.SortFunc(slow, func(a, b liveOp) int { return cmp.Compare(b.end.Sub(b.start), a.end.Sub(a.start)) })
		for _, o := range slow[:min(3, len(slow))] {
			t.Logf("%s, %s: slow %s of %.1f ms at %s (+%.1f s); PostgreSQL meanwhile:\n%s", ph.name, w.name, o.kind,
				ms(o.end.Sub(o.start)), o.start.UTC().Format("15:04:05.000"), o.start.Sub(w.from).Seconds(), s.between(o.start, o.end))
		}
	}
}

func pctDur(d []time.Duration, p int) time.Duration {
	return d[min(len(d)-1, (len(d)*p+99)/100-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// activitySampler reads pg_stat_activity of the test's database every 50 ms.
type activitySampler struct {
	done    chan struct{}
	stopped chan struct{}
	mu      sync.Mutex
	samples []activitySample
}

type activitySample struct {
	at   time.Time
	rows []backendRow // the backends that are not idle
}

type backendRow struct {
	key string // wait event, state and query
	age int    // ms since the query started
}

func startActivitySampler(t *testing.T, pool *pgxpool.Pool) *activitySampler {
	s := &activitySampler{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(s.stopped)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
			rows, err := pool.Query(context.Background(), `SELECT coalesce(wait_event_type || ':' || wait_event, 'cpu'),
					state, round(extract(epoch FROM clock_timestamp() - query_start) * 1000)::int,
					left(regexp_replace(query, '\s+', ' ', 'g'), 90)
				FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'`)
			if err != nil {
				continue
			}
			smp := activitySample{at: time.Now()}
			for rows.Next() {
				var wait, state, query string
				var age int
				if rows.Scan(&wait, &state, &age, &query) == nil {
					smp.rows = append(smp.rows, backendRow{key: wait + " " + state + ": " + query, age: age})
				}
			}
			rows.Close()
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *activitySampler) stop() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	<-s.stopped
}

// between returns what the samples taken from from to to saw: each distinct wait
// event, state and query once, with how many samples saw it and its longest age.
func (s *activitySampler) between(from, to time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen, oldest := map[string]int{}, map[string]int{}
	var order []string
	for _, smp := range s.samples {
		if smp.at.Before(from) || smp.at.After(to) {
			continue
		}
		for _, r := range smp.rows {
			if seen[r.key]++; seen[r.key] == 1 {
				order = append(order, r.key)
			}
			oldest[r.key] = max(oldest[r.key], r.age)
		}
	}
	var b strings.Builder
	for _, k := range order {
		fmt.Fprintf(&b, "    %3d× (up to %5d ms) %s\n", seen[k], oldest[k], k)
	}
	return b.String()
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
