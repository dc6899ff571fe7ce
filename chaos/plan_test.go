package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
)

// workerQueues is the --queue list of every reference worker, in poll order.
var workerQueues = []string{queueFail + "=fail", queueSleep + "=sleep", queueNoop + "=noop"}

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
	Delay      time.Duration   // scheduled this far after it is first sent; 0 = due now
	Expect     string          // done or dead
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
// window. Mix: ~45% noop, ~23% sleep 100–1500 ms, ~2% sleep 2.5–3.5 s (longer than
// the lease: heartbeats must carry them), ~20% fail 1–2 times then succeed, ~10%
// fail more times than their budget allows (must end dead); ~10% of all are
// scheduled 1–8 s ahead; priorities uniform over 1..10.
func newPlan(seed uint64, n int, window time.Duration) plan {
	rng := rand.New(rand.NewPCG(seed, 0x7461736b)) // "task"
	var p plan
	for len(p.Tasks) < n {
		class := pickClass(rng)
		size := 1
		if rng.IntN(2) > 0 { // half the requests are batches of 2..20
			size = 2 + rng.IntN(19)
		}
		size = min(size, n-len(p.Tasks))
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
	return p
}

func pickClass(rng *rand.Rand) string {
	switch r := rng.IntN(100); {
	case r < 45:
		return "noop"
	case r < 68:
		return "sleep"
	case r < 70:
		return "sleep-long"
	case r < 90:
		return "fail-recover"
	default:
		return "fail-dead"
	}
}

func queueOf(class string) string {
	switch {
	case class == "noop":
		return queueNoop
	case strings.HasPrefix(class, "sleep"):
		return queueSleep
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
		// fail_times > max_retries: every one of the max_retries+1 attempts fails.
		t.MaxRetries = rng.IntN(3)
		t.Expect = "dead"
		payload = map[string]any{"i": i, "fail_times": t.MaxRetries + 1 + rng.IntN(3)}
	}
	t.Payload, _ = json.Marshal(payload) // maps of ints always encode
	if rng.IntN(10) == 0 {
		t.Delay = time.Duration(1000+rng.IntN(7001)) * time.Millisecond
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
)

// scheduledKinds are the kinds the schedule draws from; each appears at least once.
var scheduledKinds = []faultKind{faultWorkerKill, faultWorkerPause, faultReplicaKill, faultRedisFlush,
	faultRedisRestart, faultPGFast, faultPGKill}

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
	case faultRedisRestart, faultPGKill:
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
		}
		out[i] = f
	}
	return out
}
