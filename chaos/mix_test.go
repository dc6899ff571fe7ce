package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// createQueues creates the worker queues, the probe queue, the rate-limited and the
// capped queue, and the push queue aimed at target.
func (h *harness) createQueues(target string) {
	base := map[string]any{"backoff_base_ms": 100, "backoff_max_ms": 2000}
	with := func(extra map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	bodies := []map[string]any{
		with(map[string]any{"name": queueNoop}), with(map[string]any{"name": queueSleep}),
		with(map[string]any{"name": queueFail}), with(map[string]any{"name": queueProbe}),
		with(map[string]any{"name": queueLimited, "rate_limit": limitedRate, "rate_burst": limitedBurst}),
		with(map[string]any{"name": queueCapped, "max_concurrency": cappedMax}),
		with(map[string]any{"name": queuePush, "rate_limit": pushRate, "rate_burst": pushBurst, "max_concurrency": pushMax,
			"push": map[string]any{"url": target, "timeout_ms": pushTimeout.Milliseconds()}}),
	}
	for _, b := range bodies {
		if r, ok := queueRetention[b["name"].(string)]; ok {
			b["retention"] = r
		}
		status, data, err := h.mustCall(http.MethodPost, "/queues", b, 30*time.Second)
		if err != nil || status != http.StatusCreated {
			h.t.Fatalf("create queue %v: %d %v %s", b["name"], status, err, data)
		}
	}
}

// pushRequest is one request the push target received.
type pushRequest struct {
	Task    string
	Attempt int
	Mode    string // what the target did: 200, 503, hang, close, 410
	Arrived time.Time
	Ended   time.Time // answered, closed, or the client went away
}

// pushTarget is the push queue's endpoint: it answers each task's attempts as its
// payload plans ({"push": ["503", "hang", ...]}: attempt k does the k-th, later
// attempts get 200; {"gone": true}: every attempt gets 410, also one after an
// attempt lost to a fault) and records every request.
type pushTarget struct {
	srv *httptest.Server
	mu  sync.Mutex
	log []pushRequest
	// healed holds the workflow keys whose dying step ({"gone_until_resumed": key})
	// is answered 200 from now on: the resumer is about to replay it.
	healed map[string]bool
}

// heal makes the target answer 200 to the tasks planned {"gone_until_resumed": key}.
func (p *pushTarget) heal(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healed == nil {
		p.healed = map[string]bool{}
	}
	p.healed[key] = true
}

func startPushTarget(h *harness) *pushTarget {
	p := &pushTarget{}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	h.t.Cleanup(p.srv.Close)
	return p
}

func (p *pushTarget) serve(w http.ResponseWriter, r *http.Request) {
	rec := pushRequest{Task: r.Header.Get("TaskForge-Task-Id"), Arrived: time.Now()}
	rec.Attempt, _ = strconv.Atoi(r.Header.Get("TaskForge-Attempt"))
	body, _ := io.ReadAll(r.Body)
	var payload struct {
		Push []string `json:"push"`
		Gone bool     `json:"gone"` // every attempt gets 410
		// A workflow's dying step: 410 until the resumer heals the key.
		GoneUntilResumed string `json:"gone_until_resumed"`
	}
	_ = json.Unmarshal(body, &payload)
	p.mu.Lock()
	healed := p.healed[payload.GoneUntilResumed]
	p.mu.Unlock()
	rec.Mode = "200"
	switch {
	case payload.Gone, payload.GoneUntilResumed != "" && !healed:
		rec.Mode = "410"
	case rec.Attempt >= 1 && rec.Attempt <= len(payload.Push):
		rec.Mode = payload.Push[rec.Attempt-1]
	}
	defer func() {
		rec.Ended = time.Now()
		p.mu.Lock()
		p.log = append(p.log, rec)
		p.mu.Unlock()
	}()
	switch rec.Mode {
	case "503":
		http.Error(w, "planned 503", http.StatusServiceUnavailable)
	case "410":
		http.Error(w, "planned 410", http.StatusGone)
	case "hang":
		// Past timeout_ms: the pusher gives up and closes the connection.
		select {
		case <-r.Context().Done():
		case <-time.After(4 * pushTimeout):
		}
	case "close":
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
				return
			}
		}
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}
}

func (p *pushTarget) requests() []pushRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

// cancelRecord is one cancel the test made: what the API answered, and when.
type cancelRecord struct {
	Key      string
	TaskID   string
	Status   int // 200 cancelled, 202 cancel requested, 409 already finished
	Answered time.Time
	Note     string
}

// runCanceller cancels the plan's cancel-pending tasks as soon as their enqueue is
// answered, and its cancel-executing tasks once PostgreSQL shows them executing
// (or after 20 s, whatever they are doing then). It returns when every one was
// cancelled, or when ctx ends.
func (h *harness) runCanceller(ctx context.Context, p plan, l *enqueueLedger, out *[]cancelRecord) {
	type want struct {
		spec  taskSpec
		since time.Time
	}
	var todo []want
	for _, s := range p.Tasks {
		if s.Class == "cancel-pending" || s.Class == "cancel-executing" {
			todo = append(todo, want{spec: s})
		}
	}
	for len(todo) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond): // polling the producer's ledger and PostgreSQL
		}
		var rest []want
		ids := make([]string, len(todo))
		l.mu.Lock()
		for i, w := range todo {
			ids[i] = l.ids[w.spec.Key]
		}
		l.mu.Unlock()
		statuses := h.taskStatuses(ids)
		for i, w := range todo {
			id := ids[i]
			if id == "" {
				rest = append(rest, w)
				continue
			}
			if w.since.IsZero() {
				w.since = time.Now()
			}
			if w.spec.Class == "cancel-executing" && time.Since(w.since) < 20*time.Second {
				if status := statuses[id]; status != "executing" && status != "done" && status != "dead" && status != "cancelled" {
					rest = append(rest, w)
					continue
				}
			}
			status, data, err := h.mustCall(http.MethodDelete, "/queues/"+w.spec.Queue+"/tasks/"+id, nil, time.Minute)
			rec := cancelRecord{Key: w.spec.Key, TaskID: id, Status: status, Answered: time.Now()}
			if err != nil {
				rec.Note = err.Error()
			} else if status != http.StatusOK && status != http.StatusAccepted {
				rec.Note = errorCode(data)
			}
			*out = append(*out, rec)
		}
		todo = rest
	}
}

// taskStatuses reads the status of each of ids (empty ones skipped) in one query.
func (h *harness) taskStatuses(ids []string) map[string]string {
	out := map[string]string{}
	var known []string
	for _, id := range ids {
		if id != "" {
			known = append(known, id)
		}
	}
	if len(known) == 0 {
		return out
	}
	_ = h.dbRetry(5*time.Second, func(ctx context.Context) error {
		rows, err := h.db.Query(ctx, `SELECT id::text, status FROM all_tasks WHERE id = ANY($1::uuid[])`, known)
		if err != nil {
			return err
		}
		var id, status string
		_, err = pgx.ForEachRow(rows, []any{&id, &status}, func() error {
			out[id] = status
			return nil
		})
		return err
	})
	return out
}

// windowExcess is the largest number of events in [times[i], times[j]] above what a
// token bucket of rate and burst allows, where each allowance (a moment Redis lost
// its data, or PostgreSQL came back) in or up to 2 s before the window adds a burst.
// times must be sorted. It returns the excess and the window that shows it.
func windowExcess(times []time.Time, rate float64, burst int, slack time.Duration, allowances []time.Time) (int, string) {
	worst, where := 0, ""
	for i := range times {
		for j := i; j < len(times); j++ {
			span := times[j].Sub(times[i])
			extra := 0
			for _, a := range allowances {
				if !a.Before(times[i].Add(-2*time.Second)) && !a.After(times[j]) {
					extra++
				}
			}
			allowed := float64(burst*(1+extra)) + rate*(span+slack).Seconds()
			if over := (j - i + 1) - int(allowed); over > worst {
				worst = over
				where = fmt.Sprintf("%d in %s from %s (allowed %.1f)", j-i+1, span.Round(time.Millisecond),
					times[i].Format("15:04:05.000"), allowed)
			}
		}
	}
	return worst, where
}

// interval is one execution, from its start to its end.
type interval struct {
	From, To time.Time
	What     string
}

// overCap returns the moments at which more than capacity intervals overlapped,
// except in the 2 s after a moment Redis lost its data (the cap's documented
// window, docs/flow-control.md), and the peak overall.
func overCap(ivs []interval, capacity int, losses []time.Time) (violations []string, peak int) {
	type edge struct {
		at    time.Time
		delta int
		what  string
	}
	var edges []edge
	for _, iv := range ivs {
		edges = append(edges, edge{iv.From, +1, iv.What}, edge{iv.To, -1, iv.What})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	n := 0
	for _, e := range edges {
		n += e.delta
		peak = max(peak, n)
		if e.delta > 0 && n > capacity {
			excused := false
			for _, l := range losses {
				if !e.at.Before(l) && e.at.Before(l.Add(2*time.Second)) {
					excused = true
				}
			}
			if !excused {
				violations = append(violations, fmt.Sprintf("%d at %s (%s started)", n, e.at.Format("15:04:05.000"), e.what))
			}
		}
	}
	return violations, peak
}

// claimLost reports whether a's claim may never have reached its worker: a
// replica crashed or was killed between a second before the claim and two after.
func claimLost(a dbAttempt, events []event) bool {
	for _, e := range events {
		if (strings.HasPrefix(e.Kind, "crashpoint:") || e.Kind == string(faultReplicaKill)) &&
			e.At.After(a.Started.Add(-time.Second)) && e.At.Before(a.Started.Add(2*time.Second)) {
			return true
		}
	}
	return false
}

// redisLosses are the moments Redis lost its data (FLUSHALL, restart); with
// PostgreSQL's returns they are the allowances of the rate check.
func redisLosses(events []event) (losses, pgBack []time.Time) {
	for _, e := range events {
		switch faultKind(e.Kind) {
		case faultRedisFlush:
			losses = append(losses, e.At)
		case faultRedisRestart:
			losses = append(losses, e.At, e.Back)
		case faultPGFast, faultPGKill, faultPGPause:
			pgBack = append(pgBack, e.Back)
		}
	}
	return losses, pgBack
}

// pgOutages is every interval in which PostgreSQL was stopped, killed or paused.
func pgOutages(events []event) []interval {
	var out []interval
	for _, e := range events {
		switch faultKind(e.Kind) {
		case faultPGFast, faultPGKill, faultPGPause:
			if !e.Back.IsZero() {
				out = append(out, interval{From: e.At, To: e.Back, What: e.Kind})
			}
		}
	}
	return out
}

// downDuring is how much of [from, to] the outages cover.
func downDuring(outages []interval, from, to time.Time) time.Duration {
	var d time.Duration
	for _, o := range outages {
		if lo, hi := later(o.From, from), earlier(o.To, to); hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// verifyMix checks the flow-control, cancel, timeout, graceful-stop and push parts
// of the mix.
func (h *harness) verifyMix(p plan, byKey map[string][]dbTask, byTask map[string][]dbAttempt, events []event, rep *report) {
	losses, pgBack := redisLosses(events)
	allow := append(slices.Clone(losses), pgBack...)
	pgDown := pgOutages(events)
	idOf := map[string]string{}
	classOf := map[string]string{}
	for _, s := range p.Tasks {
		if ts := byKey[s.Key]; len(ts) == 1 {
			idOf[s.Key] = ts[0].ID
			classOf[ts[0].ID] = s.Class
		}
	}
	var limitedStarts []time.Time
	var capped []interval
	var overran []string
	for id, class := range classOf {
		for _, a := range byTask[id] {
			switch class {
			case "limited":
				limitedStarts = append(limitedStarts, a.Started)
			case "capped":
				if a.Finished != nil {
					capped = append(capped, interval{a.Started, *a.Finished, fmt.Sprintf("%s attempt %d", id, a.N)})
				}
			case "timeout-dead":
				// timeout_seconds 1: the attempt ends by then, give or take a
				// watchdog pass and a lease (the worker may be stopped or dead),
				// plus the time PostgreSQL was down meanwhile: no replica can
				// record the timeout before it is back.
				if a.Finished == nil || a.Finished.Sub(a.Started) > time.Second+leaseTimeout+time.Second+
					downDuring(pgDown, a.Started, *a.Finished) {
					overran = append(overran, fmt.Sprintf("%s attempt %d %s: %v", id, a.N, a.Status, a.Finished))
				}
				if a.Status == "succeeded" {
					overran = append(overran, fmt.Sprintf("%s attempt %d succeeded past its timeout", id, a.N))
				}
			}
		}
	}
	slices.SortFunc(limitedStarts, func(a, b time.Time) int { return a.Compare(b) })
	excess, where := windowExcess(limitedStarts, limitedRate, limitedBurst, 200*time.Millisecond, allow)
	var rateBad []string
	if excess > 0 {
		rateBad = append(rateBad, where)
	}
	capBad, capPeak := overCap(capped, cappedMax, losses)
	rep.add(fmt.Sprintf("rate-limited queue: attempt starts over burst + rate·t in a window (rate %g/s, burst %d)", limitedRate, limitedBurst), excess, rateBad)
	rep.info("rate-limited queue: attempts started", len(limitedStarts))
	rep.add(fmt.Sprintf("capped queue: moments over max_concurrency %d (outside 2 s after a Redis data loss)", cappedMax), len(capBad), capBad)
	rep.info("capped queue: peak attempts executing at once", capPeak)
	rep.add("timeout tasks: attempts that ran past timeout_seconds or succeeded", len(overran), overran)

	// Cancels: a 200 means cancelled while waiting (no attempt may start after
	// it, the task ends cancelled); a 202 means requested while executing (no new
	// attempt after it; the task ends cancelled, or done when its worker acked
	// first); a 409 means it had already finished.
	var cancelBad []string
	byCancel := map[int]int{}
	for _, c := range h.cancels {
		byCancel[c.Status]++
		hist := byTask[c.TaskID]
		var end string
		for _, ts := range byKey[c.Key] {
			end = ts.Status
		}
		for _, a := range hist {
			if a.Started.After(c.Answered) {
				cancelBad = append(cancelBad, fmt.Sprintf("%s attempt %d started %s after the cancel answered %d",
					c.TaskID, a.N, a.Started.Sub(c.Answered), c.Status))
			}
		}
		switch {
		case c.Status == http.StatusOK && end != "cancelled",
			c.Status == http.StatusAccepted && end != "cancelled" && end != "done":
			cancelBad = append(cancelBad, fmt.Sprintf("%s: cancel answered %d, task ended %s", c.TaskID, c.Status, end))
		case c.Status != http.StatusOK && c.Status != http.StatusAccepted && c.Status != http.StatusConflict:
			cancelBad = append(cancelBad, fmt.Sprintf("%s: cancel answered %d %s", c.TaskID, c.Status, c.Note))
		}
	}
	planned := 0
	for _, s := range p.Tasks {
		if s.Class == "cancel-pending" || s.Class == "cancel-executing" {
			planned++
		}
	}
	if len(h.cancels) != planned {
		cancelBad = append(cancelBad, fmt.Sprintf("%d cancels made, %d planned", len(h.cancels), planned))
	}
	rep.add("cancelled tasks run after the cancel, or ending other than it said", len(cancelBad), cancelBad)
	rep.info("cancels answered 200 (waiting task cancelled)", byCancel[http.StatusOK])
	rep.info("cancels answered 202 (executing task, cancel requested)", byCancel[http.StatusAccepted])
	rep.info("cancels answered 409 (task already finished)", byCancel[http.StatusConflict])

	// Graceful stops: every attempt live at the SIGTERM ended succeeded or released,
	// or failed (or timed out) by its handler's own plan: none left to the watchdog, none nacked
	// (a spent retry) for the stop; and released attempts spend no budget (the
	// dead-budget check counts attempts but released ones).
	var termBad []string
	released, lostClaims := 0, 0
	for _, g := range h.terms {
		if g.ExitCode != 0 {
			termBad = append(termBad, fmt.Sprintf("%s exited %d after SIGTERM", g.Worker, g.ExitCode))
		}
		for _, hist := range byTask {
			for _, a := range hist {
				if a.Worker != g.Worker || !a.Started.Before(g.At) || (a.Finished != nil && a.Finished.Before(g.At)) {
					continue
				}
				switch {
				case a.Status == "released":
					released++
				case a.Status == "succeeded", a.Status == "cancelled":
				case a.Status == "failed" && (a.Queue == queueFail || a.Queue == queuePush):
					// its handler's own failure
				case (a.Status == "failed" || a.Status == "timed_out") && classOf[a.TaskID] == "timeout-dead":
					// its planned overrun: the lease ends at the deadline, and the
					// watchdog's reclaim (timed_out) races the worker's nack
				case a.Status == "abandoned" && claimLost(a, events):
					// claimed for the worker by a poll whose answer died with its
					// replica: the worker never held it, so could not release it
					lostClaims++
				default:
					termBad = append(termBad, fmt.Sprintf("%s attempt %d of %s, live at its SIGTERM, ended %s", a.TaskID, a.N, g.Worker, a.Status))
				}
			}
		}
	}
	rep.add("gracefully stopped workers: attempts left to the watchdog, or a non-zero exit", len(termBad), termBad)
	rep.info("attempts released by gracefully stopped workers", released)
	rep.info("attempts live at a graceful stop whose claim's answer died with a replica (abandoned)", lostClaims)

	// Push: every succeeded attempt was answered 2xx by the target, no planned
	// 4xx task was ever answered 2xx, and the queue's limits held at the target.
	reqs := h.push.requests()
	answered := map[string]bool{} // task/attempt → the target answered 2xx
	var arrivals []time.Time
	var inFlight []interval
	for _, r := range reqs {
		if r.Mode == "200" {
			answered[fmt.Sprintf("%s/%d", r.Task, r.Attempt)] = true
		}
		arrivals = append(arrivals, r.Arrived)
		inFlight = append(inFlight, interval{r.Arrived, r.Ended, fmt.Sprintf("%s attempt %d", r.Task, r.Attempt)})
	}
	var pushBad []string
	twice := 0
	for id, class := range classOf {
		if class != "push" && class != "push-gone" {
			continue
		}
		oks := 0
		for _, a := range byTask[id] {
			ok := answered[fmt.Sprintf("%s/%d", id, a.N)]
			if ok {
				oks++
			}
			if a.Status == "succeeded" && !ok {
				pushBad = append(pushBad, fmt.Sprintf("%s attempt %d succeeded without a 2xx from the target", id, a.N))
			}
		}
		if class == "push-gone" && oks > 0 {
			pushBad = append(pushBad, fmt.Sprintf("%s (planned 410) answered 2xx", id))
		}
		if oks > 1 {
			twice++
		}
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	pushExcess, pushWhere := windowExcess(arrivals, pushRate, pushBurst, 200*time.Millisecond, allow)
	var pushRateBad []string
	if pushExcess > 0 {
		pushRateBad = append(pushRateBad, pushWhere)
	}
	pushCapBad, pushPeak := overCap(inFlight, pushMax, losses)
	rep.add("push tasks: succeeded attempts the target did not answer 2xx, planned 4xx answered 2xx", len(pushBad), pushBad)
	rep.add(fmt.Sprintf("push target: requests over burst + rate·t in a window (rate %g/s, burst %d)", pushRate, pushBurst), pushExcess, pushRateBad)
	rep.add(fmt.Sprintf("push target: moments over max_concurrency %d in flight (outside 2 s after a Redis data loss)", pushMax), len(pushCapBad), pushCapBad)
	rep.info("push target: requests received", len(reqs))
	rep.info("push target: peak requests in flight", pushPeak)
	rep.info("push tasks answered 2xx more than once (a delivery whose ack was lost)", twice)
	h.verifyFair(p, byKey, byTask, events, rep)
}

// TestDownDuringCountsOnlyTheOverlap: the timeout check's allowance grows by the
// PostgreSQL outage inside an attempt, never by outages before or after it.
func TestDownDuringCountsOnlyTheOverlap(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 19, 16, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	outages := []interval{{From: at(1), To: at(5)}, {From: at(7), To: at(8)}, {From: at(20), To: at(30)}}
	for _, c := range []struct {
		from, to float64
		want     time.Duration
	}{
		{0, 10, 5 * time.Second},          // both outages inside
		{3, 7.5, 2500 * time.Millisecond}, // the end of one, the start of another
		{5, 7, 0},                         // between them
		{40, 50, 0},                       // after them all
	} {
		if got := downDuring(outages, at(c.from), at(c.to)); got != c.want {
			t.Errorf("downDuring [%g, %g] = %s, want %s", c.from, c.to, got, c.want)
		}
	}
}
