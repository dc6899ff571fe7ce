package e2e_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

// scheduleRunLength is how long TestScheduleFiresOncePerTickThroughKillsAndFlushes
// runs its faults: TASKFORGE_E2E_SCHEDULE_DURATION (at least 15s), or 20 s in `make
// test`. `TASKFORGE_E2E_SCHEDULE_DURATION=60s` is the run docs/schedules.md records.
func scheduleRunLength(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("TASKFORGE_E2E_SCHEDULE_DURATION")
	if v == "" {
		return 20 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 15*time.Second {
		t.Fatalf("TASKFORGE_E2E_SCHEDULE_DURATION=%q: want a duration of at least 15s", v)
	}
	return d
}

// upSpan is one incarnation of a replica: from when it answered /readyz to when it
// was SIGKILLed (zero: still running).
type upSpan struct {
	replica  int
	from, to time.Time
}

// scheduleCluster is three `taskforge serve` replicas on one database and one
// throwaway Redis, and when each incarnation was up.
type scheduleCluster struct {
	t        *testing.T
	env      []string
	mu       sync.Mutex
	replicas [3]*replica
	spans    []upSpan
}

func (c *scheduleCluster) start(i int) {
	r := startReplica(c.t, c.env)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.replicas[i] = r
	c.spans = append(c.spans, upSpan{replica: i, from: time.Now()})
}

func (c *scheduleCluster) kill(i int) {
	c.mu.Lock()
	r := c.replicas[i]
	c.replicas[i] = nil
	c.mu.Unlock()
	if r == nil {
		return
	}
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	_ = r.cmd.Wait()
	at := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for j := len(c.spans) - 1; j >= 0; j-- {
		if c.spans[j].replica == i && c.spans[j].to.IsZero() {
			c.spans[j].to = at
			break
		}
	}
}

// urls returns the URLs of the replicas running now.
func (c *scheduleCluster) urls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.replicas {
		if r != nil {
			out = append(out, r.URL)
		}
	}
	return out
}

// upThroughout reports whether some incarnation was up from from to to.
func (c *scheduleCluster) upThroughout(from, to time.Time) (upSpan, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if !s.from.After(from) && (s.to.IsZero() || !s.to.Before(to)) {
			return s, true
		}
	}
	return upSpan{}, false
}

// TestScheduleFiresOncePerTickThroughKillsAndFlushes runs three `taskforge serve`
// replicas on one @every 1s schedule while a fixed fault schedule SIGKILLs one
// replica every three seconds (restarted a second later), flushes Redis twice, and
// once kills all three for six and a half ticks; a worker polls and acks the tasks
// throughout. Then it pauses the schedule on one replica and resumes it on another.
// From PostgreSQL: every task stands for a tick of the schedule's grid (its key names
// the tick, and a task never retried has it as scheduled_at), no tick has
// two tasks, no tick is missing unless no replica was up from the tick to the next
// one, the all-down window ends in exactly one catch-up task, nothing fired while
// paused, and every task ran to done.
func TestScheduleFiresOncePerTickThroughKillsAndFlushes(t *testing.T) {
	t.Parallel()
	length := scheduleRunLength(t)
	dbURL := testenv.NewDatabase(t)
	redisServer := testenv.StartRedisServer(t)
	c := &scheduleCluster{t: t, env: []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + redisServer.Addr,
		"TASKFORGE_LEASE_TIMEOUT=2s", // an ack lost with its replica costs seconds, not 30
		"TASKFORGE_HEARTBEAT_INTERVAL=500ms",
		"TASKFORGE_WATCHDOG_INTERVAL=200ms",
		"TASKFORGE_LOG_LEVEL=warn",
	}}
	for i := range c.replicas {
		c.start(i)
	}
	base := c.urls()[0]
	if resp := testserver.Do(t, base, "POST", "/queues", map[string]any{"name": "cron"}, nil); resp.Status != 201 {
		t.Fatalf("create queue: %d %s", resp.Status, resp.Body)
	}
	resp := testserver.Do(t, c.urls()[1], "POST", "/schedules", map[string]any{
		"name": "every-second", "queue": "cron", "cron": "@every 1s", "payload": map[string]any{"n": 1}}, nil)
	if resp.Status != 201 {
		t.Fatalf("create schedule: %d %s", resp.Status, resp.Body)
	}
	var sch struct {
		NextRunAt time.Time `json:"next_run_at"`
	}
	resp.JSON(t, &sch)
	begin := time.Now()

	ctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan struct{})
	go func() {
		defer close(workerDone)
		scheduleWorker(ctx, c)
	}()
	defer func() {
		stopWorker()
		<-workerDone
	}()

	// The fault schedule: offsets from begin, each fault's start and end. Sleeping
	// until each is the schedule, not synchronisation, and at is the only wait.
	allDownAt, allDownFor := length/2, 6500*time.Millisecond
	flushes := []time.Duration{length * 3 / 10, length * 8 / 10}
	var allDown, allBack time.Time
	at := func(d time.Duration) {
		testenv.Elapse(time.Until(begin.Add(d))) // the fault's place in the schedule
	}
	var log []string
	kills := 0
	for off, victim := 2*time.Second, 0; off < length-time.Second; {
		for len(flushes) > 0 && flushes[0] <= off {
			at(flushes[0])
			redisServer.Flush(t)
			log = append(log, fmt.Sprintf("+%.1fs FLUSHALL", time.Since(begin).Seconds()))
			flushes = flushes[1:]
		}
		if allDown.IsZero() && off >= allDownAt {
			at(allDownAt)
			for i := range c.replicas {
				c.kill(i)
			}
			allDown = time.Now()
			at(allDownAt + allDownFor) // every replica down for allDownFor
			c.start(victim % 3)
			allBack = c.spans[len(c.spans)-1].from
			log = append(log, fmt.Sprintf("+%.1fs all replicas SIGKILLed, r%d back at +%.1fs", allDown.Sub(begin).Seconds(),
				victim%3, allBack.Sub(begin).Seconds()))
			for i := range c.replicas {
				if i != victim%3 {
					c.start(i)
				}
			}
			off = time.Since(begin) + time.Second
			continue
		}
		at(off)
		c.kill(victim % 3)
		kills++
		killed := time.Now()
		at(off + time.Second) // the replica down for a second
		c.start(victim % 3)
		log = append(log, fmt.Sprintf("+%.1fs r%d SIGKILLed, back at +%.1fs", killed.Sub(begin).Seconds(), victim%3,
			time.Since(begin).Seconds()))
		victim++
		off += 3 * time.Second
	}
	for _, f := range flushes {
		at(f)
		redisServer.Flush(t)
		log = append(log, fmt.Sprintf("+%.1fs FLUSHALL", time.Since(begin).Seconds()))
	}
	at(length)
	t.Logf("faults:\n  %s", strings.Join(log, "\n  "))
	if allDown.IsZero() {
		t.Fatalf("the all-down window did not happen within %s", length)
	}

	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	dbNow := func() time.Time {
		var now time.Time
		if err := conn.QueryRow(context.Background(), `SELECT now()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}

	// Pause on one replica, let three ticks pass, resume on another.
	urls := c.urls()
	pauseStart := dbNow()
	if resp := testserver.Do(t, urls[0], "PATCH", "/schedules/every-second", map[string]any{"paused": true}, nil); resp.Status != 200 {
		t.Fatalf("pause: %d %s", resp.Status, resp.Body)
	}
	pausedAt := dbNow()
	testserver.Eventually(t, 10*time.Second, "three ticks' time while paused", func() bool {
		return dbNow().Sub(pausedAt) > 3*time.Second
	})
	resp = testserver.Do(t, urls[len(urls)-1], "PATCH", "/schedules/every-second", map[string]any{"paused": false}, nil)
	if resp.Status != 200 {
		t.Fatalf("resume: %d %s", resp.Status, resp.Body)
	}
	var resumed struct {
		NextRunAt time.Time `json:"next_run_at"`
	}
	resp.JSON(t, &resumed)
	resumedAt := dbNow()
	testserver.Eventually(t, 10*time.Second, "the first tick after the resume", func() bool {
		var n int
		_ = conn.QueryRow(context.Background(), `SELECT count(*) FROM all_tasks WHERE schedule = 'every-second'
			AND scheduled_at >= $1`, resumed.NextRunAt).Scan(&n)
		return n > 0
	})
	if resp := testserver.Do(t, urls[0], "PATCH", "/schedules/every-second", map[string]any{"paused": true}, nil); resp.Status != 200 {
		t.Fatalf("pause at the end: %d %s", resp.Status, resp.Body)
	}
	testserver.Eventually(t, 60*time.Second, "every tick's task done", func() bool {
		var open int
		_ = conn.QueryRow(context.Background(), `SELECT count(*) FROM all_tasks WHERE schedule = 'every-second' AND status <> 'done'`).Scan(&open)
		return open == 0
	})

	// A tick's task keeps the tick as scheduled_at until an attempt of it is lost (its
	// worker's replica was killed before the ack arrived) and it is retried later; its
	// idempotency key names the tick for good.
	type tickRow struct {
		At        time.Time // the tick, from the key
		Scheduled time.Time
		Created   time.Time
		Key       string
		Attempts  int
	}
	rows, err := conn.Query(context.Background(), `SELECT scheduled_at, created_at, idempotency_key, attempts FROM all_tasks
		WHERE schedule = 'every-second'`)
	if err != nil {
		t.Fatal(err)
	}
	var all []tickRow
	for rows.Next() {
		var tk tickRow
		if err := rows.Scan(&tk.Scheduled, &tk.Created, &tk.Key, &tk.Attempts); err != nil {
			t.Fatal(err)
		}
		if tk.At, err = time.Parse(time.RFC3339, strings.TrimPrefix(tk.Key, "schedule:every-second:")); err != nil {
			t.Fatalf("task key %q names no tick: %v", tk.Key, err)
		}
		if tk.Attempts <= 1 && !tk.Scheduled.Equal(tk.At) {
			t.Errorf("task of tick %s (never retried) has scheduled_at %s", tk.At, tk.Scheduled)
		}
		all = append(all, tk)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(all, func(a, b tickRow) int { return a.At.Compare(b.At) })
	// Ticks before the pause are on the creation's grid; a resume starts a new one.
	var ticks, afterResume []tickRow
	for _, tk := range all {
		switch {
		case tk.At.Before(pausedAt):
			ticks = append(ticks, tk)
		case !tk.At.Before(resumed.NextRunAt):
			afterResume = append(afterResume, tk)
		default:
			t.Errorf("tick %s fired while the schedule was paused (%s to %s)", tk.At, pausedAt, resumedAt)
		}
	}
	if len(ticks) == 0 || !ticks[0].At.Equal(sch.NextRunAt) {
		t.Fatalf("first task %v, want the first tick %s", ticks[:min(1, len(ticks))], sch.NextRunAt)
	}
	if len(afterResume) == 0 || !afterResume[0].At.Equal(resumed.NextRunAt) || !resumed.NextRunAt.After(resumedAt.Add(-time.Second)) {
		t.Errorf("after the resume at %s (next_run_at %s): tasks %v", resumedAt, resumed.NextRunAt, afterResume)
	}
	for _, tk := range afterResume {
		if d := tk.At.Sub(resumed.NextRunAt); d%time.Second != 0 {
			t.Errorf("task at %s is not on the resumed schedule's grid (%s after its first tick)", tk.At, d)
		}
	}
	var missing, excused []time.Time
	var catchUp []tickRow
	var worst time.Duration
	for i, tk := range ticks {
		if d := tk.At.Sub(sch.NextRunAt); d%time.Second != 0 {
			t.Errorf("task %d at %s is not on the schedule's grid (%s after the first tick)", i, tk.At, d)
		}
		if i == 0 {
			continue
		}
		prev := ticks[i-1].At
		if tk.At.Equal(prev) {
			t.Errorf("tick %s has two tasks (keys %s, %s)", tk.At, ticks[i-1].Key, tk.Key)
			continue
		}
		if tk.At.After(allDown) && prev.Before(allDown) {
			catchUp = append(catchUp, tk)
		} else if late := tk.Created.Sub(tk.At); late > worst {
			worst = late
		}
		for m := prev.Add(time.Second); m.Before(tk.At); m = m.Add(time.Second) {
			if s, up := c.upThroughout(m, m.Add(time.Second)); up {
				t.Errorf("tick %s has no task though replica r%d was up from %s to %s", m.Format(time.StampMicro),
					s.replica, s.from.Format(time.StampMilli), s.to.Format(time.StampMilli))
				missing = append(missing, m)
			} else {
				excused = append(excused, m)
			}
		}
	}
	// The ticks between the last task and the pause, if any, were due when it came.
	if last := ticks[len(ticks)-1].At; pauseStart.Sub(last) > 2*time.Second {
		t.Errorf("last tick before the pause %s, paused at %s: ticks missing at the end", last, pauseStart)
	}
	// The all-down window: its missed ticks collapse into one catch-up task, the
	// tick most recent when the first replica came back, fired then.
	if len(catchUp) != 1 {
		t.Errorf("%d tasks after the all-down window's gap, want one catch-up: %v", len(catchUp), catchUp)
	} else if cu := catchUp[0]; cu.At.After(allBack.Add(time.Second)) || allBack.Sub(cu.At) > 5*time.Second ||
		cu.Created.Sub(cu.At) >= 1500*time.Millisecond {
		t.Errorf("catch-up task for tick %s created %s; the first replica was back at %s", cu.At, cu.Created, allBack)
	}
	if n := len(excused); n < 5 {
		t.Errorf("only %d ticks missed while every replica was down for %s", n, allDownFor)
	}
	t.Logf("%d tasks over %s, %d single-replica SIGKILLs, an all-down window of %s (%d ticks collapsed into one), "+
		"two FLUSHALLs; no tick doubled, %d missed while a replica was up; worst lateness (tick to insert) outside the catch-up %s; load %s",
		len(ticks), length, kills, allDownFor, len(excused), len(missing), worst.Round(time.Millisecond), loadAverage())
}

// scheduleWorker polls the cron queue on whichever replica runs, acking each task,
// until ctx ends. Calls that fail (a replica just killed) are retried on another.
func scheduleWorker(ctx context.Context, c *scheduleCluster) {
	for i := 0; ctx.Err() == nil; i++ {
		urls := c.urls()
		if len(urls) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond): // every replica down: wait for one
			}
			continue
		}
		api, err := client.New(urls[i%len(urls)])
		if err != nil {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		res, err := api.Poll(pctx, client.PollRequest{WorkerID: "cron-worker", Queues: []string{"cron"}, MaxTasks: 10,
			Wait: 2 * time.Second})
		cancel()
		if err != nil {
			continue
		}
		for _, task := range res.Tasks {
			actx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, _ = api.Ack(actx, "cron-worker", task.ID, task.LeaseToken, nil) // a lost ack: the lease expires and it runs again
			cancel()
		}
	}
}
