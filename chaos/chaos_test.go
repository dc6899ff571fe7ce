package chaos

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// defaultSeed makes runs without TASKFORGE_CHAOS_SEED repeat the same schedule.
const defaultSeed = 20260101

// config is one run's size, read from the environment (see the package doc).
type config struct {
	Seed   uint64
	Tasks  int
	Window time.Duration
	Report string
	// WorkerConcurrency is each reference worker's --concurrency.
	WorkerConcurrency int
}

func loadConfig(t *testing.T) config {
	t.Helper()
	c := config{Seed: defaultSeed, Tasks: 2000, Window: 90 * time.Second, Report: os.Getenv("TASKFORGE_CHAOS_REPORT"),
		WorkerConcurrency: defaultWorkerConcurrency}
	if v := os.Getenv("TASKFORGE_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TASKFORGE_CHAOS_SEED=%q: %v", v, err)
		}
		c.Seed = s
	}
	if v := os.Getenv("TASKFORGE_CHAOS_TASKS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TASKFORGE_CHAOS_TASKS=%q: want a positive integer", v)
		}
		c.Tasks = n
	}
	if v := os.Getenv("TASKFORGE_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 20*time.Second {
			t.Fatalf("TASKFORGE_CHAOS_DURATION=%q: want a duration of at least 20s", v)
		}
		c.Window = d
	}
	if v := os.Getenv("TASKFORGE_CHAOS_WORKER_CONCURRENCY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 {
			t.Fatalf("TASKFORGE_CHAOS_WORKER_CONCURRENCY=%q: want an integer from 1 to 64", v)
		}
		c.WorkerConcurrency = n
	}
	return c
}

// workflowsFor is the number of workflows a run of tasks tasks submits besides
// them: one per hundred tasks, at least eight.
func workflowsFor(tasks int) int { return max(8, tasks/100) }

// settleTimeout bounds the wait, after the fault window, for every task to end.
const settleTimeout = 3 * time.Minute

// TestChaosLosesNothing enqueues tasks of every failure mode through the API, and
// two cron schedules fire, while a seeded schedule kills, pauses and restarts every
// component, then checks in PostgreSQL that no task was lost, none succeeded twice,
// no two leases of one task overlapped, every enqueue the producer was told about
// exists exactly once, and each schedule fired one task per tick, missing none
// unless PostgreSQL or every replica was down.
func TestChaosLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fault-injection run of a few minutes; skipped under -short")
	}
	cfg := loadConfig(t)
	schedule := newSchedule(cfg.Seed, cfg.Window, numWorkers, numReplicas)
	p := newPlan(cfg.Seed, cfg.Tasks, cfg.Window-5*time.Second)
	t.Logf("chaos seed %d (TASKFORGE_CHAOS_SEED=%d repeats it): %d tasks in %d enqueue calls, %s fault window, %d faults, workers at concurrency %d:",
		cfg.Seed, cfg.Seed, len(p.Tasks), len(p.Requests), cfg.Window, len(schedule), cfg.WorkerConcurrency)
	for _, f := range schedule {
		t.Logf("  %s", f)
	}

	h := newHarness(t, cfg.WorkerConcurrency)
	h.installHistoryLog() // before any task can finish
	tj := h.startTestJanitor()
	h.push = startPushTarget(h)
	h.createQueues(h.push.srv.URL)
	h.createFairQueue()
	for _, w := range h.workers {
		if err := w.start(); err != nil {
			t.Fatalf("start worker: %v", err)
		}
	}

	h.schedules = newChaosSchedules()
	h.createSchedules()
	h.start = time.Now()
	ledger := newEnqueueLedger()
	enqueued := make(chan struct{})
	producer, stopProducer := context.WithCancel(context.Background())
	h.workflows = newWorkflowPlan(cfg.Seed, workflowsFor(cfg.Tasks), cfg.Window-5*time.Second)
	h.wfLedger = &wfLedger{ids: map[string]string{}}
	go func() {
		defer close(enqueued)
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.runWorkflows(producer, h.workflows, h.wfLedger)
		}()
		cancelled := make(chan struct{})
		go func() {
			defer close(cancelled)
			h.runCanceller(producer, p, ledger, &h.cancels)
		}()
		resumed := make(chan struct{})
		go func() {
			defer close(resumed)
			h.runResumes(producer, h.workflows, h.wfLedger)
		}()
		h.runEnqueuer(producer, p, ledger)
		<-done
		<-cancelled
		<-resumed
	}()
	t.Cleanup(func() { // never leave the producer running past the test
		stopProducer()
		<-enqueued
	})

	in := &injector{h: h}
	for _, f := range schedule {
		hold(time.Until(h.start.Add(f.At))) // the fault's place in the schedule
		in.run(f)
	}
	hold(time.Until(h.start.Add(cfg.Window))) // the rest of the fault window: crash points still fire

	// Settle: crash points off (a graceful restart of the replicas that had them),
	// every worker running, and wait for every task to end.
	windowEnd := time.Now()
	h.pauseSchedules()
	for _, r := range h.replica {
		if r.crashpoints != "" {
			r.restartCalm()
		}
	}
	for _, w := range h.workers {
		if _, pr := w.current(); pr != nil {
			pr.signal(syscall.SIGCONT) // none should be stopped; make sure
		}
	}
	select {
	case <-enqueued:
	case <-time.After(settleTimeout):
		t.Errorf("the producer had not finished %s after the fault window", settleTimeout)
	}
	// Retention by the day: no workflow is left to resume, so the test's janitor's
	// clock moves a day and a retention ahead, and faults strike while it drops the
	// days (held back while a running workflow has a task in them).
	tj.jumpAhead()
	for _, f := range retentionTail {
		in.run(f)
		hold(time.Second) // the tail's spacing: part of the schedule
	}
	select {
	case <-tj.droppedAhead:
	case <-time.After(settleTimeout):
		t.Errorf("the test's janitor dropped no day of done tasks within %s of its clock's jump", settleTimeout)
	}
	settled := poll(settleTimeout, func() bool {
		var open int
		err := h.dbRetry(5*time.Second, func(ctx context.Context) error {
			return h.db.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE status NOT IN ('done', 'dead', 'cancelled')`).Scan(&open)
		})
		return err == nil && open == 0
	})
	rep := &report{Seed: cfg.Seed, Tasks: cfg.Tasks, Window: cfg.Window, Schedule: schedule,
		Settle: time.Since(windowEnd), Wall: time.Since(h.start), WindowStart: h.start}
	if !settled {
		t.Errorf("tasks still open %s after the fault window (see 'tasks lost' below)", settleTimeout)
	}

	tj.stop() // the replicas' janitors go on: the verifier reads one snapshot at a time
	h.verify(p, ledger, in, rep)
	fig := h.verifyRetention(tj, rep)
	text := rep.text()
	t.Log("\n" + text)
	if cfg.Report != "" {
		if err := os.WriteFile(cfg.Report, []byte(text), 0o644); err != nil {
			t.Errorf("write report: %v", err)
		}
	}
	for _, c := range rep.Checks {
		if c.Assert && c.Value != c.Want {
			t.Errorf("%s: %d, want %d; e.g. %v", c.Name, c.Value, c.Want, c.Examples)
		}
	}
	injected := map[string]bool{}
	for _, e := range rep.Events {
		injected[e.Kind] = true
	}
	for _, k := range scheduledKinds {
		if !injected[string(k)] {
			t.Errorf("no %s fault was injected: the run proves nothing about it", k)
		}
	}
	if len(in.probes) == 0 {
		t.Errorf("no stale-lease probe ran")
	}
	// Each way out of history taken, or the run proves nothing about it.
	for what, n := range map[string]int{"in batches on the database clock": fig.BatchReplicas,
		"with their workflow, whole": fig.WithWorkflow, "with their day's partitions": fig.ByDrop} {
		if n == 0 {
			t.Errorf("no task left history %s: the run proves nothing about it", what)
		}
	}
}

// TestScheduleIsDeterministic checks that a seed fixes the task mix and the fault
// schedule, and that every fault kind is scheduled even in a short window.
func TestScheduleIsDeterministic(t *testing.T) {
	a := newSchedule(7, 60*time.Second, numWorkers, numReplicas)
	b := newSchedule(7, 60*time.Second, numWorkers, numReplicas)
	if len(a) != len(b) {
		t.Fatalf("schedules differ in length: %d, %d", len(a), len(b))
	}
	kinds := map[faultKind]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("fault %d differs: %v vs %v", i, a[i], b[i])
		}
		if i > 0 && a[i].At <= a[i-1].At {
			t.Fatalf("faults out of order: %v then %v", a[i-1], a[i])
		}
		if a[i].At >= 60*time.Second {
			t.Fatalf("fault %v outside the window", a[i])
		}
		kinds[a[i].Kind] = true
	}
	for _, k := range scheduledKinds {
		if !kinds[k] {
			t.Errorf("kind %s not scheduled", k)
		}
	}
	if c := newSchedule(8, 60*time.Second, numWorkers, numReplicas); len(c) == len(a) && c[0] == a[0] && c[1] == a[1] {
		t.Errorf("seeds 7 and 8 gave the same schedule start")
	}

	p1, p2 := newPlan(7, 500, time.Minute), newPlan(7, 500, time.Minute)
	if len(p1.Tasks) != 500 || len(p2.Tasks) != 500 || len(p1.Requests) != len(p2.Requests) {
		t.Fatalf("plans: %d/%d tasks, %d/%d requests", len(p1.Tasks), len(p2.Tasks), len(p1.Requests), len(p2.Requests))
	}
	classes := map[string]int{}
	for i := range p1.Tasks {
		a, b := p1.Tasks[i], p2.Tasks[i]
		if a.Key != b.Key || string(a.Payload) != string(b.Payload) || a.Priority != b.Priority || a.Delay != b.Delay {
			t.Fatalf("task %d differs: %+v vs %+v", i, a, b)
		}
		if a.Class == "fail-dead" && a.MaxRetries >= 3 {
			t.Fatalf("must-die task with budget %d", a.MaxRetries)
		}
		classes[a.Class]++
	}
	for _, c := range []string{"noop", "sleep", "fail-recover", "fail-dead"} {
		if classes[c] == 0 {
			t.Errorf("no %s task in 500", c)
		}
	}
	// The rarer classes of the bounded run's 2,000 tasks.
	classes = map[string]int{}
	for _, task := range newPlan(defaultSeed, 2000, time.Minute).Tasks {
		classes[task.Class]++
	}
	for _, c := range []string{"sleep-long", "timeout-dead", "cancel-pending", "cancel-executing", "limited", "capped", "push", "push-gone"} {
		if classes[c] == 0 {
			t.Errorf("no %s task in the bounded run's 2,000", c)
		}
	}
}
