package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// dbTask and dbAttempt are the rows the verifier reads.
type dbTask struct {
	ID         string
	Queue      string
	Status     string
	Attempts   int
	MaxRetries int
	Key        *string
	Dispatched *time.Time // when the dispatcher last moved it into the Redis buffer
	Schedule   *string    // the schedule whose tick created it, if any
	WorkflowID *string    // the workflow whose step it is, if any
	Scheduled  time.Time  // scheduled_at: for a schedule's task, its tick
	Created    time.Time
	Step       *string    // the workflow step it runs, if any
	Replayed   *string    // replayed_from: the task it replays (a resumed step's task replaces one)
	Finished   *time.Time // finished_at
	// Removed: retention removed it from history; this is the row as it entered
	// history, from the test's history log (retention_test.go).
	Removed bool
}

type dbAttempt struct {
	TaskID   string
	N        int
	Worker   string
	Token    string
	Status   string
	Started  time.Time
	Finished *time.Time
	Queue    string
}

// check is one verified figure: its value and, for an invariant, the value it must
// have. Examples name a few offending tasks.
type check struct {
	Name     string
	Value    int
	Want     int
	Assert   bool
	Examples []string
}

// report is everything one run measured.
type report struct {
	Seed        uint64
	Tasks       int
	WindowStart time.Time
	Window      time.Duration
	Wall        time.Duration // from the first request to the end of the settle
	Settle      time.Duration // from the end of the fault window until every task was terminal
	Schedule    []fault
	Events      []event
	Checks      []check
	Counts      map[string]int // final status → tasks
	Lost        map[string]int // lost attempt status → attempts that were re-run
	Causes      map[string]int // attributed fault → re-run attempts
	Lags        []lagRow
	Enqueue     *enqueueLedger
	LateLogs    int // "lease lost"/"refused" lines paused workers logged after SIGCONT
	// Examples lists a few lost attempts per attributed cause.
	Examples map[string][]string
}

// lagRow is one line of the recovery table: a fault kind and one measure.
type lagRow struct {
	Kind, Measure string
	N             int
	P50, P95, Max time.Duration
}

func (r *report) add(name string, value int, examples []string) {
	r.Checks = append(r.Checks, check{Name: name, Value: value, Assert: true, Examples: firstN(examples, 5)})
}

func (r *report) info(name string, value int) {
	r.Checks = append(r.Checks, check{Name: name, Value: value})
}

func firstN(s []string, n int) []string { return s[:min(n, len(s))] }

// load reads every task and attempt.
func (h *harness) load() ([]dbTask, []dbAttempt) {
	var tasks []dbTask
	var attempts []dbAttempt
	err := h.dbRetry(time.Minute, func(ctx context.Context) error {
		// One snapshot for both: a run that did not settle still reads a
		// consistent state.
		tx, err := h.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := tx.Query(ctx, `SELECT id::text, queue, status, attempts, max_retries, idempotency_key, dispatched_at,
			schedule, workflow_id::text, scheduled_at, created_at, step, replayed_from::text, finished_at, false FROM all_tasks
			UNION ALL `+removedTasksSQL)
		if err != nil {
			return err
		}
		if tasks, err = pgx.CollectRows(rows, pgx.RowToStructByPos[dbTask]); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT task_id::text, attempt, worker_id, lease_token::text, status, started_at, finished_at, queue
			FROM all_attempts UNION ALL `+removedAttemptsSQL+` ORDER BY 1, 2`)
		if err != nil {
			return err
		}
		attempts, err = pgx.CollectRows(rows, pgx.RowToStructByPos[dbAttempt])
		return err
	})
	if err != nil {
		h.t.Fatalf("read tasks and attempts: %v", err)
	}
	return tasks, attempts
}

// tallyDrift compares, per queue and status, the counts the transitions kept (the
// folded totals plus the deltas not folded yet) with count(*), and returns the
// differences as "queue/status kept K, counted N".
func (h *harness) tallyDrift() []string {
	var drift []string
	err := h.dbRetry(time.Minute, func(ctx context.Context) error {
		rows, err := h.db.Query(ctx, `WITH kept AS (
				SELECT queue, metric AS status, sum(n)::bigint AS n FROM (
					SELECT queue, metric, n FROM queue_tally WHERE bucket = '-infinity'
					UNION ALL
					SELECT queue, metric, delta FROM queue_tally_delta WHERE bucket = '-infinity') k
				GROUP BY 1, 2),
			counted AS (SELECT queue, status, count(*) AS n FROM all_tasks GROUP BY 1, 2)
			SELECT coalesce(k.queue, c.queue), coalesce(k.status, c.status), coalesce(k.n, 0), coalesce(c.n, 0)
			FROM kept k FULL JOIN counted c ON c.queue = k.queue AND c.status = k.status
			WHERE coalesce(k.n, 0) <> coalesce(c.n, 0)`)
		if err != nil {
			return err
		}
		drift = drift[:0]
		var queue, status string
		var kept, counted int64
		_, err = pgx.ForEachRow(rows, []any{&queue, &status, &kept, &counted}, func() error {
			drift = append(drift, fmt.Sprintf("%s/%s kept %d, counted %d", queue, status, kept, counted))
			return nil
		})
		return err
	})
	if err != nil {
		h.t.Fatalf("compare kept counts: %v", err)
	}
	return drift
}

// verify checks the final state in PostgreSQL against the plan and what the
// producer, the probes and the fault log recorded.
func (h *harness) verify(p plan, l *enqueueLedger, in *injector, rep *report) {
	tasks, attempts := h.load()
	byTask := map[string][]dbAttempt{}
	for _, a := range attempts {
		byTask[a.TaskID] = append(byTask[a.TaskID], a)
	}
	byKey := map[string][]dbTask{}
	byID := map[string]dbTask{}
	var extra []string
	for _, t := range tasks {
		byID[t.ID] = t
		switch {
		case t.Queue == queueProbe, t.Schedule != nil, t.WorkflowID != nil: // checked by verifySchedules, verifyWorkflows
		case t.Key == nil:
			extra = append(extra, t.ID)
		default:
			byKey[*t.Key] = append(byKey[*t.Key], t)
		}
	}

	// Enqueue: every 2xx id exists under its key, every key maps to one task, and
	// no task exists that the producer did not ask for.
	var missing2xx, idMismatch, keyNotOne, lostTasks, wrongEnd, deadBudget, early []string
	planned := map[string]bool{}
	rep.Counts = map[string]int{}
	for _, spec := range p.Tasks {
		planned[spec.Key] = true
		ts := byKey[spec.Key]
		id, got2xx := l.ids[spec.Key]
		if !got2xx {
			missing2xx = append(missing2xx, spec.Key)
		}
		if len(ts) != 1 {
			keyNotOne = append(keyNotOne, fmt.Sprintf("%s → %d tasks", spec.Key, len(ts)))
			if len(ts) == 0 {
				lostTasks = append(lostTasks, spec.Key+" (never stored)")
			}
			continue
		}
		t := ts[0]
		if got2xx && id != t.ID {
			idMismatch = append(idMismatch, fmt.Sprintf("%s: answered %s, stored %s", spec.Key, id, t.ID))
		}
		rep.Counts[t.Status]++
		hist := byTask[t.ID]
		switch {
		case t.Status != "done" && t.Status != "dead" && t.Status != "cancelled":
			lostTasks = append(lostTasks, fmt.Sprintf("%s %s (%s, %d attempts)", t.ID, t.Status, spec.Class, t.Attempts))
		case t.Status != spec.Expect:
			wrongEnd = append(wrongEnd, fmt.Sprintf("%s %s: %s, want %s; attempts %s", t.ID, spec.Class, t.Status, spec.Expect, historyOf(hist)))
		}
		// A released attempt (a graceful stop) spends no budget; a 4xx from a push
		// target ends the task at once.
		spent := 0
		for _, a := range hist {
			if a.Status != "released" {
				spent++
			}
		}
		if t.Status == "dead" && spec.Class != "push-gone" && spent != t.MaxRetries+1 {
			deadBudget = append(deadBudget, fmt.Sprintf("%s: %d attempts (%d released), max_retries %d",
				t.ID, len(hist), len(hist)-spent, t.MaxRetries))
		}
		if at, ok := l.scheduledAt[spec.Key]; ok && len(hist) > 0 && hist[0].Started.Before(at) {
			early = append(early, fmt.Sprintf("%s: started %s, scheduled %s", t.ID, hist[0].Started.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano)))
		}
	}
	for key, ts := range byKey {
		if !planned[key] {
			for _, t := range ts {
				extra = append(extra, t.ID+" key "+key)
			}
		}
	}

	// Attempts: contiguous, one success at most and only as the last attempt, no
	// overlap between consecutive attempts, none left executing, tokens unique.
	var gaps, multi, afterSuccess, overlap, executing, doneNotLast, unexpectedFail []string
	tokens := map[string]int{}
	dupTokens := 0
	classOf := map[string]string{}
	for _, spec := range p.Tasks {
		if ts := byKey[spec.Key]; len(ts) == 1 {
			classOf[ts[0].ID] = spec.Class
		}
	}
	for _, t := range tasks {
		hist := byTask[t.ID]
		succeeded := 0
		for i, a := range hist {
			if tokens[a.Token]++; tokens[a.Token] == 2 {
				dupTokens++
			}
			if a.N != i+1 {
				gaps = append(gaps, fmt.Sprintf("%s: attempts %s", t.ID, historyOf(hist)))
				break
			}
			if a.Status == "executing" {
				executing = append(executing, fmt.Sprintf("%s attempt %d by %s", t.ID, a.N, a.Worker))
			}
			if a.Status == "succeeded" {
				succeeded++
				if i != len(hist)-1 {
					afterSuccess = append(afterSuccess, fmt.Sprintf("%s: %s", t.ID, historyOf(hist)))
				}
			}
			if c := classOf[t.ID]; a.Status == "failed" && (c == "noop" || c == "sleep" || c == "sleep-long" || c == "limited" || c == "capped") {
				unexpectedFail = append(unexpectedFail, fmt.Sprintf("%s (%s) attempt %d by %s", t.ID, classOf[t.ID], a.N, a.Worker))
			}
			if i > 0 {
				prev := hist[i-1]
				if prev.Finished == nil || a.Started.Before(*prev.Finished) {
					overlap = append(overlap, fmt.Sprintf("%s: attempt %d started %s before attempt %d finished (%v)",
						t.ID, a.N, a.Started.Format(time.RFC3339Nano), prev.N, prev.Finished))
				}
			}
		}
		if len(hist) != t.Attempts {
			gaps = append(gaps, fmt.Sprintf("%s: task says %d attempts, %d recorded", t.ID, t.Attempts, len(hist)))
		}
		if succeeded > 1 {
			multi = append(multi, fmt.Sprintf("%s: %s", t.ID, historyOf(hist)))
		}
		if t.Status == "done" && (len(hist) == 0 || hist[len(hist)-1].Status != "succeeded") {
			doneNotLast = append(doneNotLast, fmt.Sprintf("%s: %s", t.ID, historyOf(hist)))
		}
	}

	// Duplicate executions: attempts lost to a fault (abandoned or timed out) whose
	// task then ran again, by the lost attempt's status and by the fault it follows.
	events := h.eventsSnapshot()
	rep.Events = events
	killed, paused := map[string]time.Time{}, map[string]pauseRecord{}
	for _, e := range events {
		if e.Kind == string(faultWorkerKill) {
			for _, v := range e.Victims {
				killed[v] = e.At
			}
		}
	}
	for _, pr := range in.pauses {
		paused[pr.Worker] = pr
	}
	rep.Lost, rep.Causes = map[string]int{}, map[string]int{}
	for _, t := range tasks {
		if t.Queue == queueProbe {
			continue
		}
		hist := byTask[t.ID]
		for _, a := range hist[:max(0, len(hist)-1)] {
			if a.Status != "abandoned" && a.Status != "timed_out" {
				continue
			}
			rep.Lost[a.Status]++
			cause := attribute(a, killed, paused, events)
			if a.Status == "timed_out" && classOf[t.ID] == "timeout-dead" {
				cause = "timeout_seconds (planned overrun)"
			}
			rep.Causes[cause]++
			if len(rep.Examples[cause]) < 3 {
				if rep.Examples == nil {
					rep.Examples = map[string][]string{}
				}
				rep.Examples[cause] = append(rep.Examples[cause], fmt.Sprintf("%s attempt %d by %s, %s to %s",
					a.TaskID, a.N, a.Worker, a.Started.Format("15:04:05.000"), a.Finished.Format("15:04:05.000")))
			}
		}
	}

	// Paused workers: nothing they held when stopped may have been acked or nacked
	// after they were continued (their lease was reclaimed while they slept).
	var lateAccepted []string
	for _, pr := range in.pauses {
		for _, a := range attempts {
			if a.Worker == pr.Worker && a.Started.Before(pr.StoppedAt) && (a.Status == "succeeded" || a.Status == "failed") &&
				a.Finished != nil && !a.Finished.Before(pr.ContAt) {
				lateAccepted = append(lateAccepted, fmt.Sprintf("%s attempt %d by %s finished %s after SIGCONT",
					a.TaskID, a.N, a.Worker, a.Finished.Sub(pr.ContAt)))
			}
		}
		rep.LateLogs += countLateLogLines(pr)
	}

	// Stale-lease probes: heartbeat, ack and nack with an expired, reclaimed lease all
	// got 409 lease_lost and changed nothing, both before the task was leased again
	// and while a fresh lease was live; the fresh lease then finished the task.
	var probeBad []string
	staleCalls := 0
	for _, pr := range in.probes {
		for _, c := range sortedKeys(pr.Stale) {
			staleCalls++
			if got := pr.Stale[c]; got != "409 lease_lost" {
				probeBad = append(probeBad, fmt.Sprintf("%s stale %s: %s", pr.Worker, c, got))
			}
		}
		if pr.Failure != "" {
			probeBad = append(probeBad, pr.Worker+": "+pr.Failure)
			continue
		}
		if len(pr.Stale) != 6 {
			probeBad = append(probeBad, fmt.Sprintf("%s: %d stale calls made, want 6", pr.Worker, len(pr.Stale)))
		}
		if !pr.Unchanged {
			probeBad = append(probeBad, pr.Worker+": stale calls changed the task or its attempts")
		}
		if pr.FinalAck != "200" {
			probeBad = append(probeBad, fmt.Sprintf("%s: ack with a fresh lease: %s", pr.Worker, pr.FinalAck))
		}
		hist := byTask[pr.TaskID]
		if t := byID[pr.TaskID]; t.Status != "done" || len(hist) < 2 || hist[0].Status != "abandoned" ||
			hist[len(hist)-1].Worker != pr.Worker+"-fresh" {
			probeBad = append(probeBad, fmt.Sprintf("%s: task %s ended %s with attempts %s", pr.Worker, pr.TaskID, t.Status, historyOf(hist)))
		}
	}

	rep.add("tasks lost (not done or dead, or never stored)", len(lostTasks), lostTasks)
	rep.add("tasks ending other than their failure mode says", len(wrongEnd), wrongEnd)
	rep.add("tasks with more than one succeeded attempt", len(multi), multi)
	rep.add("tasks with an attempt after a succeeded one", len(afterSuccess), afterSuccess)
	rep.add("done tasks whose last attempt did not succeed", len(doneNotLast), doneNotLast)
	rep.add("tasks with overlapping attempts (two valid leases)", len(overlap), overlap)
	rep.add("tasks with non-contiguous attempt numbers", len(gaps), gaps)
	rep.add("attempts still executing", len(executing), executing)
	rep.add("lease tokens used by more than one attempt", dupTokens, nil)
	rep.add("dead tasks whose attempts (released ones aside) are not max_retries+1", len(deadBudget), deadBudget)
	rep.add("tasks started before their scheduled_at", len(early), early)
	rep.add("keys without a 2xx answer", len(missing2xx), missing2xx)
	rep.add("2xx ids not stored under their key", len(idMismatch), idMismatch)
	rep.add("keys not mapping to exactly one task", len(keyNotOne), keyNotOne)
	rep.add("tasks the producer never asked for", len(extra), extra)
	rep.add("half-made enqueues (some but not all tasks of a failed call)", len(l.halfMade), l.halfMade)
	rep.add("enqueue problems (4xx, conflicts, never answered)", len(l.problems), l.problems)
	rep.add("late acks/nacks of paused workers accepted", len(lateAccepted), lateAccepted)
	rep.add("stale-lease probe calls not refused with 409, or changing state", len(probeBad), probeBad)
	drift := h.tallyDrift()
	rep.add("queue/status counts whose kept figure differs from count(*)", len(drift), drift)
	rep.info("stale-lease probe calls made (heartbeat, ack, nack; before and while re-leased)", staleCalls)
	inconclusive := 0
	for _, pr := range in.probes {
		if pr.Inconclusive {
			inconclusive++
		}
	}
	rep.info("probes whose fresh lease lapsed during the stale calls", inconclusive)
	rep.info("failed attempts of noop/sleep tasks (none expected)", len(unexpectedFail))
	h.verifyMix(p, byKey, byTask, events, rep)
	rep.Enqueue = l
	rep.Lags = lags(events, tasks, attempts, byTask)
	h.verifySchedules(tasks, events, rep)
	h.verifyWorkflows(h.workflows, h.wfLedger, byID, byTask, rep)
}

// attribute names the fault that most likely cost a lost attempt: the worker's own
// SIGKILL or SIGSTOP, else the latest fault shortly before the lease stopped being
// renewed (or a lasting fault, a pause or a partition, still on when the attempt
// started). It is a heuristic for the report; no check depends on it.
func attribute(a dbAttempt, killed map[string]time.Time, paused map[string]pauseRecord, events []event) string {
	live := func(at time.Time) bool { return a.Started.Before(at) && a.Finished != nil && a.Finished.After(at) }
	if at, ok := killed[a.Worker]; ok && live(at) {
		return "worker SIGKILL"
	}
	if pr, ok := paused[a.Worker]; ok && live(pr.StoppedAt) {
		return "worker SIGSTOP"
	}
	// The lease was last renewed at most a heartbeat interval (plus a watchdog sweep)
	// before it expired, and it expired a lease timeout before the reclaim ended the
	// attempt: the latest fault between a second before the attempt started and that
	// moment is the one that cut it off.
	if a.Finished == nil {
		return "unattributed"
	}
	lastSign := a.Finished.Add(-leaseTimeout + heartbeatInterval + 300*time.Millisecond)
	best := ""
	var bestAt time.Time
	for _, e := range events {
		// A fault that lasts (a pause, a partition) counts while it is on.
		on := e.At.After(a.Started.Add(-time.Second)) || (!e.Back.IsZero() && e.Back.After(a.Started))
		if on && !e.At.After(lastSign) && e.At.After(bestAt) {
			best, bestAt = e.Kind, e.At
		}
	}
	if best == "" {
		return "unattributed"
	}
	return best
}

func historyOf(hist []dbAttempt) string {
	parts := make([]string, len(hist))
	for i, a := range hist {
		parts[i] = fmt.Sprintf("%d:%s/%s", a.N, a.Status, a.Worker)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// countLateLogLines counts the lines a paused worker logged after SIGCONT about a
// lease it had lost (a refused heartbeat, ack or nack).
func countLateLogLines(pr pauseRecord) int {
	b, err := os.ReadFile(pr.LogPath)
	if err != nil || int64(len(b)) < pr.LogOffset {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(b[pr.LogOffset:]), "\n") {
		if strings.Contains(line, "worker_id="+pr.Worker) &&
			(strings.Contains(line, "lease lost") || strings.Contains(line, "lease was lost") || strings.Contains(line, "lease expired")) {
			n++
		}
	}
	return n
}

// lags computes recovery times per fault kind: from injection to the next
// succeeded ack and the next claim cluster-wide, the time the target was down, for
// killed or paused workers from the fault to the re-delivery of each task they
// held, and for Redis data loss from the fault to the claim of each task that was
// in the buffer.
func lags(events []event, tasks []dbTask, attempts []dbAttempt, byTask map[string][]dbAttempt) []lagRow {
	var acks, claims []time.Time
	for _, a := range attempts {
		claims = append(claims, a.Started)
		if a.Status == "succeeded" && a.Finished != nil {
			acks = append(acks, *a.Finished)
		}
	}
	slices.SortFunc(acks, func(a, b time.Time) int { return a.Compare(b) })
	slices.SortFunc(claims, func(a, b time.Time) int { return a.Compare(b) })
	next := func(ts []time.Time, after time.Time) (time.Duration, bool) {
		i := sort.Search(len(ts), func(i int) bool { return ts[i].After(after) })
		if i == len(ts) {
			return 0, false
		}
		return ts[i].Sub(after), true
	}
	type key struct{ kind, measure string }
	samples := map[key][]time.Duration{}
	var order []key
	add := func(k key, d time.Duration) {
		if _, ok := samples[k]; !ok {
			order = append(order, k)
		}
		samples[k] = append(samples[k], d)
	}
	// Every abandoned attempt, by worker incarnation, with the attempt that re-ran it.
	type rerun struct{ lost, next dbAttempt }
	byWorker := map[string][]rerun{}
	for _, hist := range byTask {
		for i, a := range hist[:max(0, len(hist)-1)] {
			if a.Status == "abandoned" && a.Finished != nil {
				byWorker[a.Worker] = append(byWorker[a.Worker], rerun{a, hist[i+1]})
			}
		}
	}
	for _, e := range events {
		if d, ok := next(acks, e.At); ok {
			add(key{e.Kind, "next ack"}, d)
		}
		if d, ok := next(claims, e.At); ok {
			add(key{e.Kind, "next claim"}, d)
		}
		if !e.Back.IsZero() && !strings.HasPrefix(e.Kind, "crashpoint") {
			add(key{e.Kind, "down (until restarted/continued)"}, e.Back.Sub(e.At))
		}
		// Redis lost its data: the tasks that sat in the buffer then (dispatched
		// before, claimed by a worker only after) come back through the dispatcher's
		// repair pass. This includes ordinary waiting in the buffer, small here.
		if e.Kind == string(faultRedisFlush) || e.Kind == string(faultRedisRestart) {
			for _, t := range tasks {
				hist := byTask[t.ID]
				if t.Dispatched == nil || !t.Dispatched.Before(e.At) || len(hist) == 0 {
					continue
				}
				if last := hist[len(hist)-1]; last.Started.After(e.At) {
					add(key{e.Kind, "buffered tasks claimed again"}, last.Started.Sub(e.At))
				}
			}
		}
		// The tasks a killed or paused worker held at that moment: attempts started
		// before the fault and still live at it.
		for _, v := range e.Victims {
			for _, r := range byWorker[v] {
				if r.lost.Started.Before(e.At) && r.lost.Finished.After(e.At) {
					add(key{e.Kind, "re-delivery of held tasks"}, r.next.Started.Sub(e.At))
				}
			}
		}
	}
	slices.SortStableFunc(order, func(a, b key) int { return strings.Compare(a.kind, b.kind) })
	var rows []lagRow
	for _, k := range order {
		s := samples[k]
		slices.Sort(s)
		rows = append(rows, lagRow{Kind: k.kind, Measure: k.measure, N: len(s),
			P50: pct(s, 50), P95: pct(s, 95), Max: s[len(s)-1]})
	}
	return rows
}

// pct is the nearest-rank percentile of sorted s.
func pct(s []time.Duration, p int) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := (p*len(s)+99)/100 - 1
	return s[min(max(i, 0), len(s)-1)]
}

// text renders the report for the test log and for TASKFORGE_CHAOS_REPORT.
func (r *report) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Chaos run: seed %d, %d tasks, %s fault window\n\n", r.Seed, r.Tasks, r.Window)
	fmt.Fprintf(&b, "Wall time %s (fault window, then %s until every task was terminal).\n\n",
		r.Wall.Round(time.Second), r.Settle.Round(100*time.Millisecond))
	b.WriteString("### Schedule (from the seed)\n\n```\n")
	for _, f := range r.Schedule {
		b.WriteString(f.String() + "\n")
	}
	b.WriteString("```\n\n### Faults as injected\n\n```\n")
	crash := map[string]int{}
	start := r.WindowStart
	for _, e := range r.Events {
		if strings.HasPrefix(e.Kind, "crashpoint:") {
			crash[e.Kind+" "+e.Target]++
			continue
		}
		line := fmt.Sprintf("+%6.1fs %-15s %s", e.At.Sub(start).Seconds(), e.Kind, e.Target)
		if !e.Back.IsZero() {
			line += fmt.Sprintf("  back after %s", e.Back.Sub(e.At).Round(time.Millisecond))
		}
		if e.Note != "" {
			line += "  (" + e.Note + ")"
		}
		b.WriteString(line + "\n")
	}
	keys := make([]string, 0, len(crash))
	for k := range crash {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "         %-40s x%d\n", k, crash[k])
	}
	b.WriteString("```\n\n### Invariants and figures\n\n| figure | value | required |\n|---|---:|---:|\n")
	for _, c := range r.Checks {
		want := ""
		if c.Assert {
			want = fmt.Sprint(c.Want)
		}
		fmt.Fprintf(&b, "| %s | %d | %s |\n", c.Name, c.Value, want)
	}
	l := r.Enqueue
	fmt.Fprintf(&b, "\nFinal states: %v. Enqueue calls answered 2xx: %d; calls that failed (5xx or cut off) and were retried "+
		"with the same keys: %d, of which %d had committed anyway; atomicity unchecked: %d.\n",
		r.Counts, l.requests, l.failedCalls, l.committedAnyway, l.unchecked)
	fmt.Fprintf(&b, "Paused workers logged %d refused late calls after SIGCONT.\n", r.LateLogs)
	b.WriteString("\n### Duplicate executions (a lost attempt, then the task ran again)\n\n| lost attempt status | re-runs |\n|---|---:|\n")
	total := 0
	for _, k := range sortedKeys(r.Lost) {
		fmt.Fprintf(&b, "| %s | %d |\n", k, r.Lost[k])
		total += r.Lost[k]
	}
	fmt.Fprintf(&b, "| **total** | %d |\n\n| attributed to | re-runs |\n|---|---:|\n", total)
	for _, k := range sortedKeys(r.Causes) {
		fmt.Fprintf(&b, "| %s | %d |\n", k, r.Causes[k])
	}
	b.WriteString("\nFor example:\n\n```\n")
	for _, k := range sortedKeys(r.Causes) {
		for _, e := range r.Examples[k] {
			fmt.Fprintf(&b, "%-34s %s\n", k, e)
		}
	}
	b.WriteString("```\n")
	b.WriteString("\n\n### Recovery lags\n\n| fault | measure | n | p50 | p95 | max |\n|---|---|---:|---:|---:|---:|\n")
	for _, row := range r.Lags {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s |\n", row.Kind, row.Measure, row.N,
			row.P50.Round(time.Millisecond), row.P95.Round(time.Millisecond), row.Max.Round(time.Millisecond))
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
