package chaos

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// The fair queue (docs/flow-control.md, "Fair queues"): groups take turns under the
// queue's cap, each group under a cap and a token bucket of its own.
const (
	queueFair = "fair"
	// fairQueueMax is the fair queue's own max_concurrency: the resource the groups
	// take turns at.
	fairQueueMax = 3
	// The queue's group defaults, which the limit groups run under.
	fairGroupMax   = 2
	fairGroupRate  = 4.0
	fairGroupBurst = 2
	// fairOpenMax, fairOpenRate and fairOpenBurst are the overrides of the big and
	// the turn groups: a cap as large as the queue's and a rate they never reach,
	// so that only the turns stand between the big group's backlog and the queue's
	// slots.
	fairOpenMax   = fairQueueMax
	fairOpenRate  = 50.0
	fairOpenBurst = 10
	// fairBig is the group that enqueues a backlog each round.
	fairBig = "big"
)

// fairTurnGroups enqueue one or two tasks at a time while the big group has a
// backlog; fairLimitGroups enqueue batches past their cap and burst.
var (
	fairTurnGroups  = []string{"t0", "t1", "t2", "t3"}
	fairLimitGroups = []string{"l0", "l1", "l2"}
)

// fairShare is how many of a run's n tasks go to the fair queue: a tenth, from 50
// tasks on.
func fairShare(n int) int {
	if n < 50 {
		return 0
	}
	return n / 10
}

// fairLimits is a group's effective cap, rate and burst.
func fairLimits(group string) (capacity int, rate float64, burst int) {
	if group == fairBig || slices.Contains(fairTurnGroups, group) {
		return fairOpenMax, fairOpenRate, fairOpenBurst
	}
	return fairGroupMax, fairGroupRate, fairGroupBurst
}

// appendFairTasks adds n fair-queue tasks to p in rounds spread over window. Each
// round opens with a backlog of the big group (half the round's tasks, 300–700 ms
// sleeps: seconds of the queue's three slots), then, within the next ~15 % of the
// round, the turn groups enqueue one or two short tasks at a time (a quarter) and the
// limit groups batches of 6–10 (the rest) that their cap of 2 and bucket of 4/s,
// burst 2, must hold back. Every fair task has priority 5: turns order groups within
// a priority level, and the check of turns needs them on one.
func appendFairTasks(p *plan, seed uint64, n int, window time.Duration) {
	if n == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(seed, 0x66616972)) // "fair"
	rounds := max(4, n/50)
	roundLen := time.Duration(int64(window) * 9 / 10 / int64(rounds))
	add := func(group, class string, size int, at time.Duration, lo, hi int) {
		req := enqueueRequest{Queue: queueFair, At: at}
		for range size {
			i := len(p.Tasks)
			payload := fmt.Sprintf(`{"i":%d,"ms":%d}`, i, lo+rng.IntN(hi-lo+1))
			p.Tasks = append(p.Tasks, taskSpec{Key: fmt.Sprintf("chaos-%d-%d", seed, i), Class: class, Queue: queueFair,
				Payload: []byte(payload), Priority: 5, MaxRetries: goodRetries, Expect: "done", Group: group})
			req.Tasks = append(req.Tasks, i)
		}
		p.Requests = append(p.Requests, req)
	}
	left := n
	for r := range rounds {
		budget := left / (rounds - r)
		left -= budget
		start := time.Duration(r)*roundLen + roundLen/20
		big, turn := budget/2, budget/4
		limit := budget - big - turn
		for big > 0 { // batches of at most 25
			size := min(big, 25)
			add(fairBig, "fair-big", size, start, 300, 700)
			big -= size
		}
		for turn > 0 {
			size := min(turn, 1+rng.IntN(2))
			at := start + 200*time.Millisecond + time.Duration(rng.Int64N(int64(roundLen*15/100)))
			add(fairTurnGroups[rng.IntN(len(fairTurnGroups))], "fair-turn", size, at, 50, 200)
			turn -= size
		}
		for limit > 0 {
			size := min(limit, 6+rng.IntN(5))
			at := start + time.Duration(rng.Int64N(int64(roundLen*30/100)))
			add(fairLimitGroups[rng.IntN(len(fairLimitGroups))], "fair-limit", size, at, 100, 400)
			limit -= size
		}
	}
}

// createFairQueue creates the fair queue and the big and turn groups' overrides.
func (h *harness) createFairQueue() {
	body := map[string]any{"name": queueFair, "backoff_base_ms": 100, "backoff_max_ms": 2000,
		"fairness": "round_robin", "max_concurrency": fairQueueMax, "group_max_concurrency": fairGroupMax,
		"group_rate_limit": fairGroupRate, "group_rate_burst": fairGroupBurst}
	if status, data, err := h.mustCall(http.MethodPost, "/queues", body, 30*time.Second); err != nil || status != http.StatusCreated {
		h.t.Fatalf("create queue %s: %d %v %s", queueFair, status, err, data)
	}
	for _, g := range append([]string{fairBig}, fairTurnGroups...) {
		open := map[string]any{"max_concurrency": fairOpenMax, "rate_limit": fairOpenRate, "rate_burst": fairOpenBurst}
		if status, data, err := h.mustCall(http.MethodPut, "/queues/"+queueFair+"/groups/"+g, open, 30*time.Second); err != nil || status != http.StatusOK {
			h.t.Fatalf("set group %s: %d %v %s", g, status, err, data)
		}
	}
}

// turnBatch is one enqueue of a turn group: when its tasks were all in the buffer
// (Stored), and when each first started, in order, with whether a fault excuses
// that start's wait.
type turnBatch struct {
	Group   string
	Stored  time.Time
	Starts  []time.Time
	Excused []bool
}

// turnSlack is what the bound of turns allows beyond ⌊k·w_X/w_B⌋ + 1 (equal
// weights: k + 1) other-group starts before a batch's k-th, counted from the
// batch's dispatch commit: the tasks already popped for other groups then (at most
// the queue's cap: popped tasks hold its slots) and one more popped between that
// commit and the buffer's add.
const turnSlack = fairQueueMax + 1

// turnExcess checks turns: for each batch of a turn group, and each j-th of its
// starts, the starts of every other group in (stored, j-th start] must be at most
// j + 1 + turnSlack. Excused starts (a fault lost the task's buffer entry or its
// pop while it waited) are counted apart. It returns the violations, the case
// closest to (or furthest past) its bound, how many starts waited while another
// group started (contended: the check was not vacuous for them) and how many were
// excused.
func turnExcess(batches []turnBatch, starts map[string][]time.Time) (bad []string, worst string, contended, skipped int) {
	worstOver := -1 << 30
	for _, b := range batches {
		for j, s := range b.Starts {
			if j < len(b.Excused) && b.Excused[j] {
				skipped++
				continue
			}
			busy := false
			for _, x := range sortedKeys(starts) {
				if x == b.Group {
					continue
				}
				n := countIn(starts[x], b.Stored, s)
				if n > 0 {
					busy = true
				}
				bound := j + 1 + 1 + turnSlack
				if n-bound > worstOver {
					worstOver = n - bound
					worst = fmt.Sprintf("%s started %d before %s's task %d of %d (bound %d), stored %s, started after %s",
						x, n, b.Group, j+1, len(b.Starts), bound, b.Stored.Format("15:04:05.000"), s.Sub(b.Stored).Round(time.Millisecond))
				}
				if n > bound {
					bad = append(bad, fmt.Sprintf("%s started %d tasks before task %d of %s's batch stored %s (bound %d; it waited %s)",
						x, n, j+1, b.Group, b.Stored.Format("15:04:05.000"), bound, s.Sub(b.Stored).Round(time.Millisecond)))
				}
			}
			if busy {
				contended++
			}
		}
	}
	return bad, worst, contended, skipped
}

// countIn is the number of sorted times in (from, to].
func countIn(times []time.Time, from, to time.Time) int {
	after := func(t, x time.Time) int {
		if t.After(x) {
			return 1
		}
		return -1
	}
	lo, _ := slices.BinarySearchFunc(times, from, after)
	hi, _ := slices.BinarySearchFunc(times, to, after)
	return hi - lo
}

// slotReconcileLag is how long a slot taken by a lost pop can stay taken: the
// slot reconcile's period.
const slotReconcileLag = 5 * time.Second

// turnExcused names the fault that may have cost a turn-group task its place
// between stored and its first start, or returns "": its buffer entry lost (Redis
// lost its data, or the replica that committed its dispatch crashed before the
// add: the repair pass re-adds it seconds later), or its pop lost (Redis paused
// under the pop, a replica killed, crashed after a pop or cut off, or PostgreSQL
// down under the claim: the slot reconcile frees it after 5 s). Only a fault
// during the task's own wait counts, with one exception: a replica's death, cut
// or crash after a pop counts from slotReconcileLag before the task was stored,
// since the group slots its lost pops took (of this group's earlier tasks too)
// stay taken until the reconcile frees them, and the group waits at its cap
// meanwhile (seen once in CI: a turn group stored 0.4 s after a replica kill
// started 4 s later).
func turnExcused(stored, dispatched, start time.Time, events []event) string {
	for _, e := range events {
		end := e.At
		if !e.Back.IsZero() {
			end = e.Back
		}
		during := !end.Before(stored) && !e.At.After(start)
		struck := !e.At.Before(stored.Add(-slotReconcileLag)) && !e.At.After(start)
		switch faultKind(e.Kind) {
		case faultRedisFlush, faultRedisRestart, faultRedisPause, faultPGFast, faultPGKill, faultPGPause:
			if during { // every pop or claim while it lasts may lose its ids
				return e.Kind
			}
		case faultReplicaKill, faultPartition:
			if struck { // the replica's pops in flight at that moment
				return e.Kind
			}
		}
		switch e.Kind {
		case "crashpoint:after-pop":
			if struck {
				return e.Kind
			}
		case "crashpoint:after-dispatch-commit":
			if !dispatched.IsZero() && !e.At.Before(dispatched) && e.At.Before(dispatched.Add(300*time.Millisecond)) {
				return e.Kind
			}
		}
	}
	return ""
}

// verifyFair checks the fair queue across the faults: no group above its cap at
// once and the queue not above its own, no group starting more than its bucket
// allows in any window, turns (no turn group's task waits while another group gets
// more than the bound's share of the queue), and no failed attempt (every fair task
// sleeps and succeeds). Lost tasks are counted with all the others by verify.
func (h *harness) verifyFair(p plan, byKey map[string][]dbTask, byTask map[string][]dbAttempt, events []event, rep *report) {
	losses, pgBack := redisLosses(events)
	allow := append(slices.Clone(losses), pgBack...)
	ivs := map[string][]interval{}
	starts := map[string][]time.Time{}
	var all []interval
	var failed []string
	for _, s := range p.Tasks {
		ts := byKey[s.Key]
		if s.Queue != queueFair || len(ts) != 1 {
			continue
		}
		for _, a := range byTask[ts[0].ID] {
			starts[s.Group] = append(starts[s.Group], a.Started)
			if a.Status == "failed" {
				failed = append(failed, fmt.Sprintf("%s (%s) attempt %d by %s", a.TaskID, s.Group, a.N, a.Worker))
			}
			if a.Finished != nil {
				iv := interval{a.Started, *a.Finished, fmt.Sprintf("%s/%s attempt %d", s.Group, a.TaskID, a.N)}
				ivs[s.Group] = append(ivs[s.Group], iv)
				all = append(all, iv)
			}
		}
	}
	for g := range starts {
		slices.SortFunc(starts[g], func(a, b time.Time) int { return a.Compare(b) })
	}
	var capBad, rateBad []string
	peak := map[string]int{}
	for _, g := range sortedKeys(starts) {
		capacity, rate, burst := fairLimits(g)
		bad, pk := overCap(ivs[g], capacity, losses)
		peak[g] = pk
		for _, b := range bad {
			capBad = append(capBad, fmt.Sprintf("group %s (cap %d): %s", g, capacity, b))
		}
		if excess, where := windowExcess(starts[g], rate, burst, 200*time.Millisecond, allow); excess > 0 {
			rateBad = append(rateBad, fmt.Sprintf("group %s (rate %g/s, burst %d): %d over in %s", g, rate, burst, excess, where))
		}
	}
	queueBad, queuePeak := overCap(all, fairQueueMax, losses)

	var batches []turnBatch
	var waits, delays []time.Duration
	excuses := map[string]int{}
	for _, r := range p.Requests {
		if r.Queue != queueFair || p.Tasks[r.Tasks[0]].Class != "fair-turn" {
			continue
		}
		// Turns are the pop's: they count from the moment the whole batch was in
		// the buffer (its last dispatch commit; the enqueue's own when it buffered
		// the tasks itself). How long the dispatcher took to get it there is
		// reported beside them.
		b := turnBatch{Group: p.Tasks[r.Tasks[0]].Group}
		var run []dbTask
		var enqueued time.Time
		first := func(t dbTask) time.Time { return byTask[t.ID][0].Started }
		for _, ti := range r.Tasks {
			ts := byKey[p.Tasks[ti].Key]
			if len(ts) != 1 || len(byTask[ts[0].ID]) == 0 {
				continue // lost or never run: counted by verify
			}
			t := ts[0]
			enqueued = later(enqueued, t.Created)
			b.Stored = later(b.Stored, t.Created)
			// A dispatched_at after the first start is a retry's dispatch.
			if t.Dispatched != nil && t.Dispatched.Before(first(t)) {
				b.Stored = later(b.Stored, *t.Dispatched)
			}
			run = append(run, t)
		}
		slices.SortFunc(run, func(x, y dbTask) int { return first(x).Compare(first(y)) })
		if len(run) > 0 {
			delays = append(delays, b.Stored.Sub(enqueued))
		}
		for _, t := range run {
			var dispatched time.Time
			if t.Dispatched != nil {
				dispatched = *t.Dispatched
			}
			b.Starts = append(b.Starts, first(t))
			waits = append(waits, first(t).Sub(t.Created))
			why := turnExcused(enqueued, dispatched, first(t), events)
			b.Excused = append(b.Excused, why != "")
			if why != "" {
				excuses[why]++
			}
		}
		if len(b.Starts) > 0 {
			batches = append(batches, b)
		}
	}
	turnBad, worst, contended, excused := turnExcess(batches, starts)
	slices.Sort(waits)
	slices.Sort(delays)

	rep.add(fmt.Sprintf("fair queue: moments a group was over its cap (%d; big and turn groups %d; outside 2 s after a Redis data loss)",
		fairGroupMax, fairOpenMax), len(capBad), capBad)
	rep.add(fmt.Sprintf("fair queue: moments over the queue's max_concurrency %d", fairQueueMax), len(queueBad), queueBad)
	rep.add(fmt.Sprintf("fair queue: groups starting over burst + rate·t in a window (limit groups %g/s burst %d)",
		fairGroupRate, fairGroupBurst), len(rateBad), rateBad)
	rep.add(fmt.Sprintf("fair queue: turn-group starts after more than k+%d of another group's (k-th of a batch)", 1+turnSlack),
		len(turnBad), turnBad)
	rep.add("fair queue: failed attempts (every task sleeps and succeeds)", len(failed), failed)
	rep.info("fair queue: turn-group starts checked while another group also started", contended)
	rep.info("fair queue: turn-group starts not checked (a fault may have lost their buffer entry or pop)", excused)
	rep.info("fair queue: turn-group wait from enqueue to first start, p50 ms", int(pct(waits, 50).Milliseconds()))
	rep.info("fair queue: turn-group wait from enqueue to first start, p99 ms", int(pct(waits, 99).Milliseconds()))
	rep.info("fair queue: turn-group batches' enqueue to all in the buffer (dispatched_at), p50 ms", int(pct(delays, 50).Milliseconds()))
	rep.info("fair queue: turn-group batches' enqueue to all in the buffer (dispatched_at), max ms", int(pct(delays, 100).Milliseconds()))
	rep.info("fair queue: peak attempts executing at once", queuePeak)
	rep.info("fair queue: peak attempts of the big group at once", peak[fairBig])
	rep.info("fair queue: peak attempts of a limit group at once", max(peak["l0"], peak["l1"], peak["l2"]))
	if worst != "" {
		h.t.Logf("fair queue, the turn check's closest case: %s", worst)
	}
	if len(excuses) > 0 {
		h.t.Logf("fair queue, turn-group starts not checked, by the fault in their wait: %v", excuses)
	}
	if len(batches) >= 20 && contended == 0 {
		h.t.Errorf("fair queue: no turn-group start waited beside another group's: the turn check proved nothing")
	}
}

// TestTurnExcessFlagsAStarvedGroup: the turn check passes a batch served in its
// turn and flags one that waited behind the big group's backlog, unless a fault
// excuses the wait.
func TestTurnExcessFlagsAStarvedGroup(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var big []time.Time
	for ms := 0; ms < 10000; ms += 100 { // a backlog going out at 10/s
		big = append(big, at(ms))
	}
	fair := []turnBatch{{Group: "t0", Stored: at(1000), Starts: []time.Time{at(1150), at(1350)}}}
	starts := map[string][]time.Time{"big": big, "t0": fair[0].Starts}
	if bad, _, contended, _ := turnExcess(fair, starts); len(bad) != 0 || contended != 2 {
		t.Errorf("served in its turn: violations %v, contended %d (want none, 2)", bad, contended)
	}
	starved := []turnBatch{{Group: "t0", Stored: at(1000), Starts: []time.Time{at(1150), at(3000)}}}
	starts["t0"] = starved[0].Starts
	bad, worst, _, _ := turnExcess(starved, starts)
	if len(bad) != 1 || !strings.Contains(bad[0], "big started 20 tasks before task 2") {
		t.Errorf("starved: violations %v (worst %s), want one: big started 20 before task 2", bad, worst)
	}
	starved[0].Excused = []bool{false, true}
	if bad, _, _, skipped := turnExcess(starved, starts); len(bad) != 0 || skipped != 1 {
		t.Errorf("starved during a fault: violations %v, skipped %d; want none, 1 (the second start)", bad, skipped)
	}
	// A Redis flush in the wait excuses it; a dispatch crash excuses only the
	// tasks whose dispatch it cut short.
	flush := []event{{Kind: string(faultRedisFlush), At: at(2000)}}
	crash := []event{{Kind: "crashpoint:after-dispatch-commit", At: at(1105)}}
	killedAt := func(ms int) []event { // ms from the store at 1000
		return []event{{Kind: string(faultReplicaKill), At: at(1000 + ms), Back: at(1000 + ms + 1500)}}
	}
	for _, c := range []struct {
		name              string
		dispatched, start time.Time
		events            []event
		want              bool
	}{
		{"flush in the wait", at(1100), at(3000), flush, true},
		{"flush after the start", at(1100), at(1500), flush, false},
		{"its dispatch crashed", at(1100), at(3000), crash, true},
		{"another dispatch crashed", at(1500), at(3000), crash, false},
		{"a replica killed just before it was stored", at(1100), at(3000), killedAt(-400), true},
		{"a replica killed long before it was stored", at(1100), at(3000), killedAt(-6000), false},
		{"a replica killed after its start", at(1100), at(3000), killedAt(2500), false},
	} {
		if got := turnExcused(at(1000), c.dispatched, c.start, c.events) != ""; got != c.want {
			t.Errorf("%s: excused %v, want %v", c.name, got, c.want)
		}
	}
}

// TestFairPlanIsDeterministicAndShaped: the fair share of a plan repeats from its
// seed, sends every fair request to one group, and opens each round with a backlog
// of the big group before the turn groups' tasks.
func TestFairPlanIsDeterministicAndShaped(t *testing.T) {
	a, b := newPlan(7, 2000, 85*time.Second), newPlan(7, 2000, 85*time.Second)
	classes := map[string]int{}
	for i := range a.Tasks {
		if a.Tasks[i].Key != b.Tasks[i].Key || a.Tasks[i].Group != b.Tasks[i].Group || string(a.Tasks[i].Payload) != string(b.Tasks[i].Payload) {
			t.Fatalf("task %d differs: %+v vs %+v", i, a.Tasks[i], b.Tasks[i])
		}
		if a.Tasks[i].Queue == queueFair {
			classes[a.Tasks[i].Class]++
		}
	}
	if classes["fair-big"] != 100 || classes["fair-turn"] != 48 || classes["fair-limit"] != 52 {
		t.Errorf("fair classes %v, want 100 big, 48 turn, 52 limit of 200", classes)
	}
	var firstBig, firstTurn time.Duration = -1, -1
	for i, r := range a.Requests {
		if i > 0 && r.At < a.Requests[i-1].At {
			t.Fatalf("request %d at %s before request %d at %s", i, r.At, i-1, a.Requests[i-1].At)
		}
		if r.Queue != queueFair {
			continue
		}
		g := a.Tasks[r.Tasks[0]].Group
		for _, ti := range r.Tasks {
			if a.Tasks[ti].Group != g {
				t.Fatalf("request %d mixes groups %s and %s", i, g, a.Tasks[ti].Group)
			}
		}
		switch {
		case g == fairBig && firstBig < 0:
			firstBig = r.At
		case a.Tasks[r.Tasks[0]].Class == "fair-turn" && firstTurn < 0:
			firstTurn = r.At
		}
	}
	if firstBig < 0 || firstTurn <= firstBig {
		t.Errorf("first big request at %s, first turn request at %s: the backlog must come first", firstBig, firstTurn)
	}
}
