package chaos

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The queues the workers serve, each with its built-in handler, and the probe
// queue that no worker serves (the test polls it itself).
const (
	queueNoop  = "noop"
	queueSleep = "sleep"
	queueFail  = "fail"
	queueProbe = "probe"
	// queueLimited is rate-limited (noop handler), queueCapped capped (sleep
	// handler), queuePush a push queue with both limits whose target the test runs.
	queueLimited = "limited"
	queueCapped  = "capped"
	queuePush    = "push"
)

// The limits of the flow-controlled queues (see docs/flow-control.md).
const (
	limitedRate  = 25.0 // tasks/s handed out from queueLimited, summed over replicas
	limitedBurst = 5
	cappedMax    = 3 // attempts of queueCapped executing at once
	pushRate     = 40.0
	pushBurst    = 8
	pushMax      = 4
	pushTimeout  = 800 * time.Millisecond // the push target's timeout_ms
)

// workerQueues is the --queue list of the reference workers. A poll takes from its
// queues in the order given, so each worker starts it at a different queue
// (pollOrder): with one fixed order, a backlog on the first queues starves the
// last ones of every worker at once.
var workerQueues = []string{queueFail + "=fail", queueSleep + "=sleep", queueNoop + "=noop",
	queueLimited + "=noop", queueCapped + "=sleep", queueFair + "=sleep"}

// pollOrder is worker idx's --queue list: workerQueues rotated by idx.
func pollOrder(idx int) []string {
	n := idx % len(workerQueues)
	return append(append([]string(nil), workerQueues[n:]...), workerQueues[:n]...)
}

// goodRetries is the budget of tasks that must end done: large enough that the
// attempts lost to faults (a few per task at worst) never exhaust it.
const goodRetries = 10

// taskSpec is one planned task: what is sent and what it must end as.
type taskSpec struct {
	Key        string          // idempotency key, unique per run
	Class      string          // noop, sleep, sleep-long, fail-recover, fail-dead
	Queue      string          // the queue (and so the handler)
	Payload    json.RawMessage // the handler's input
	Priority   int             // 1..10
	MaxRetries int             // per-task budget
	Timeout    int             // timeout_seconds; 0 = none
	Delay      time.Duration   // scheduled this far after it is first sent; 0 = due now
	Expect     string          // done, dead or cancelled
	Group      string          // the task's group (fair queue only); "" = none
}

// enqueueRequest is one planned API call: a single enqueue (one task) or a batch.
type enqueueRequest struct {
	Queue string
	Tasks []int         // indexes into plan.Tasks
	At    time.Duration // offset from the start of the run at which it is sent
}

// plan is the task mix of a run.
type plan struct {
	Tasks    []taskSpec
	Requests []enqueueRequest
}

// newPlan draws n tasks from seed and groups them into requests spread evenly over
// window. Mix: ~40% noop, ~20% sleep 100–1500 ms, ~2% sleep 2.5–3.5 s (longer than
// the lease: heartbeats must carry them), ~18% fail 1–2 times then succeed, ~8%
// fail more times than their budget allows (must end dead), ~2% overrun a
// timeout_seconds of 1 on every attempt (must end dead), ~1% are cancelled while
// pending and ~1% while executing (must end cancelled), ~3% go to the rate-limited
// queue, ~2% to the capped one, ~2.5% to the push queue (failing 0–2 times at the
// target: 503, a hang past timeout_ms, a closed connection) and ~0.5% to it with
// a 410 (must end dead at once); ~10% of all are scheduled 1–8 s ahead; priorities
// uniform over 1..10. A tenth of the n (from 50 tasks on) go to the fair queue
// instead, in groups (appendFairTasks), their requests placed among the others'.
func newPlan(seed uint64, n int, window time.Duration) plan {
	rng := rand.New(rand.NewPCG(seed, 0x7461736b)) // "task"
	var p plan
	nFair := fairShare(n)
	for len(p.Tasks) < n-nFair {
		class := pickClass(rng)
		size := 1
		if rng.IntN(2) > 0 { // half the requests are batches of 2..20
			size = 2 + rng.IntN(19)
		}
		if class == "limited" || class == "capped" || strings.HasPrefix(class, "push") {
			size = 10 + rng.IntN(11) // batches past the burst: the limits must bite
		}
		size = min(size, n-nFair-len(p.Tasks))
		req := enqueueRequest{Queue: queueOf(class)}
		for range size {
			t := newTask(rng, class, seed, len(p.Tasks))
			req.Tasks = append(req.Tasks, len(p.Tasks))
			p.Tasks = append(p.Tasks, t)
		}
		p.Requests = append(p.Requests, req)
	}
	for i := range p.Requests {
		p.Requests[i].At = time.Duration(int64(window) * int64(i) / int64(len(p.Requests)))
	}
	appendFairTasks(&p, seed, nFair, window)
	// The enqueuer sends requests in order, each at its offset.
	slices.SortStableFunc(p.Requests, func(a, b enqueueRequest) int { return cmp.Compare(a.At, b.At) })
	return p
}

// maxReleasesPerTask bounds the released attempts (graceful stops) a fail-dead task's
// handler must outlast; a run stops a few workers gracefully, each releasing at most
// its held tasks once.
const maxReleasesPerTask = 100

func pickClass(rng *rand.Rand) string {
	switch r := rng.IntN(1000); {
	case r < 400:
		return "noop"
	case r < 600:
		return "sleep"
	case r < 620:
		return "sleep-long"
	case r < 800:
		return "fail-recover"
	case r < 880:
		return "fail-dead"
	case r < 900:
		return "timeout-dead"
	case r < 910:
		return "cancel-pending"
	case r < 920:
		return "cancel-executing"
	case r < 950:
		return "limited"
	case r < 970:
		return "capped"
	case r < 995:
		return "push"
	default:
		return "push-gone"
	}
}

func queueOf(class string) string {
	switch {
	case class == "noop", class == "cancel-pending":
		return queueNoop
	case strings.HasPrefix(class, "sleep"), class == "timeout-dead", class == "cancel-executing":
		return queueSleep
	case class == "limited":
		return queueLimited
	case class == "capped":
		return queueCapped
	case strings.HasPrefix(class, "push"):
		return queuePush
	default:
		return queueFail
	}
}

func newTask(rng *rand.Rand, class string, seed uint64, i int) taskSpec {
	t := taskSpec{Key: fmt.Sprintf("chaos-%d-%d", seed, i), Class: class, Queue: queueOf(class),
		Priority: 1 + rng.IntN(10), MaxRetries: goodRetries, Expect: "done"}
	var payload any
	switch class {
	case "noop":
		payload = map[string]any{"i": i}
	case "sleep":
		payload = map[string]any{"i": i, "ms": 100 + rng.IntN(1401)}
	case "sleep-long":
		payload = map[string]any{"i": i, "ms": 2500 + rng.IntN(1001)}
	case "fail-recover":
		payload = map[string]any{"i": i, "fail_times": 1 + rng.IntN(2)}
	case "fail-dead":
		// fail_times > max_retries: every one of the max_retries+1 attempts fails. The
		// handler counts attempt numbers, and an attempt released by a graceful stop takes
		// a number without spending budget (a seed of 2026-12-05: attempts failed,
		// released, then 3 > fail_times 2 succeeded), so fail_times leaves room for
		// releases beyond any run's.
		t.MaxRetries = rng.IntN(3)
		t.Expect = "dead"
		payload = map[string]any{"i": i, "fail_times": t.MaxRetries + 1 + rng.IntN(3) + maxReleasesPerTask}
	case "timeout-dead":
		// Every attempt sleeps past timeout_seconds: the budget runs out.
		t.MaxRetries, t.Timeout, t.Expect = 1, 1, "dead"
		payload = map[string]any{"i": i, "ms": 1500 + rng.IntN(1001)}
	case "cancel-pending":
		// Due long after the run: the test cancels it while it waits.
		t.Expect = "cancelled"
		payload = map[string]any{"i": i}
	case "cancel-executing":
		// Long enough for the test to see it executing and cancel it.
		t.Expect = "cancelled"
		payload = map[string]any{"i": i, "ms": 3000 + rng.IntN(1001)}
	case "limited":
		payload = map[string]any{"i": i}
	case "capped":
		payload = map[string]any{"i": i, "ms": 100 + rng.IntN(401)}
	case "push":
		modes := []string{"503", "hang", "close"}
		var plan []string
		for range rng.IntN(3) {
			plan = append(plan, modes[rng.IntN(len(modes))])
		}
		payload = map[string]any{"i": i, "push": plan}
	case "push-gone":
		// A 4xx ends the task dead at once, whatever its budget.
		t.Expect = "dead"
		payload = map[string]any{"i": i, "gone": true}
	}
	t.Payload, _ = json.Marshal(payload) // maps of ints and strings always encode
	if rng.IntN(10) == 0 {
		t.Delay = time.Duration(1000+rng.IntN(7001)) * time.Millisecond
	}
	if class == "cancel-pending" {
		t.Delay = 10 * time.Minute
	} else if class == "cancel-executing" {
		t.Delay = 0
	}
	return t
}

// faultKind names one kind of injected fault.
type faultKind string

const (
	faultWorkerKill   faultKind = "worker-kill"     // SIGKILL 1–3 workers holding tasks; restart after Down
	faultWorkerPause  faultKind = "worker-pause"    // SIGSTOP a worker past its lease, probe a stale lease, SIGCONT
	faultReplicaKill  faultKind = "replica-kill"    // SIGKILL a serve replica; restart after Down
	faultRedisFlush   faultKind = "redis-flush"     // FLUSHALL
	faultRedisRestart faultKind = "redis-restart"   // SIGKILL redis-server; restart after Down (empty)
	faultPGFast       faultKind = "pg-restart-fast" // pg_ctl stop -m fast, then start
	faultPGKill       faultKind = "pg-kill"         // SIGKILL the postmaster and backends; restart after Down
	faultWorkerTerm   faultKind = "worker-term"     // SIGTERM a worker holding tasks (grace, then release); restart after Down
	faultPGPause      faultKind = "pg-pause"        // SIGSTOP PostgreSQL (every process) for Down, longer than the lease
	faultRedisPause   faultKind = "redis-pause"     // SIGSTOP redis-server for Down
	faultPartition    faultKind = "partition"       // blackhole a running replica's PostgreSQL and Redis traffic for Down
)

// scheduledKinds are the kinds the schedule draws from; each appears at least once.
var scheduledKinds = []faultKind{faultWorkerKill, faultWorkerPause, faultReplicaKill, faultRedisFlush,
	faultRedisRestart, faultPGFast, faultPGKill, faultWorkerTerm, faultPGPause, faultRedisPause, faultPartition}

// fault is one entry of the schedule.
type fault struct {
	At     time.Duration // offset from the start of the fault window
	Kind   faultKind
	Target int           // preferred worker or replica index (a worker holding no task is passed over)
	Count  int           // workers to kill (worker-kill)
	Down   time.Duration // how long the target stays down before it is restarted
}

func (f fault) String() string {
	s := fmt.Sprintf("+%5.1fs %-15s", f.At.Seconds(), f.Kind)
	switch f.Kind {
	case faultWorkerKill:
		s += fmt.Sprintf(" workers=%d from w%d, down %s", f.Count, f.Target, f.Down)
	case faultWorkerPause:
		s += fmt.Sprintf(" worker w%d", f.Target)
	case faultReplicaKill:
		s += fmt.Sprintf(" replica r%d, down %s", f.Target, f.Down)
	case faultWorkerTerm:
		s += fmt.Sprintf(" worker w%d, down %s", f.Target, f.Down)
	case faultPartition:
		s += fmt.Sprintf(" replica r%d, cut %s", f.Target, f.Down)
	case faultRedisRestart, faultPGKill, faultPGPause, faultRedisPause:
		s += fmt.Sprintf(" down %s", f.Down)
	}
	return s
}

// faultSpacing is the mean distance between two scheduled faults; a fault and its
// recovery take up to a few seconds, so the next one finds the system working again
// (or still recovering, which is fine).
const faultSpacing = 5500 * time.Millisecond

// newSchedule draws the fault schedule of a window from seed: every kind at least
// once, more faults of random kinds as the window allows, in random order, spaced
// about faultSpacing apart from 3 s in until 5 s before the window ends.
func newSchedule(seed uint64, window time.Duration, workers, replicas int) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x6661756c)) // "faul"
	span := max(window-8*time.Second, time.Second)
	n := max(len(scheduledKinds), int(span/faultSpacing))
	kinds := append([]faultKind(nil), scheduledKinds...)
	for len(kinds) < n {
		kinds = append(kinds, scheduledKinds[rng.IntN(len(scheduledKinds))])
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	step := span / time.Duration(n)
	out := make([]fault, n)
	for i, k := range kinds {
		f := fault{At: 3*time.Second + time.Duration(i)*step + time.Duration(rng.Int64N(int64(step/3))), Kind: k}
		ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
		switch k {
		case faultWorkerKill:
			f.Target, f.Count, f.Down = rng.IntN(workers), 1+rng.IntN(3), ms(200, 2000)
		case faultWorkerPause:
			f.Target = rng.IntN(workers)
		case faultReplicaKill:
			f.Target, f.Down = rng.IntN(replicas), ms(500, 3000)
		case faultRedisRestart:
			f.Down = ms(300, 2000)
		case faultPGKill:
			f.Down = ms(500, 2500)
		case faultWorkerTerm:
			f.Target, f.Down = rng.IntN(workers), ms(200, 1500)
		case faultPGPause:
			f.Down = leaseTimeout + ms(1000, 2500)
		case faultRedisPause:
			f.Down = ms(500, 3000)
		case faultPartition:
			// Past a push attempt's lease (timeout_ms + 5 s): the partitioned
			// replica's requests in flight are reclaimed by the others.
			f.Target, f.Down = rng.IntN(replicas), pushTimeout+5*time.Second+ms(500, 2000)
		}
		out[i] = f
	}
	return out
}
