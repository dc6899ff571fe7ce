package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/client"
)

// The fair experiment measures fair queues (docs/flow-control.md, "Fair queues")
// in three parts, each run once per run:
//
//   - backlog: one group with Fair.Backlog due tasks (bulk-loaded before serve
//     starts) drains through the layout; once it flows, Fair.SmallGroups groups
//     enqueue Fair.SmallTasks tasks each (one batch per group), and the step
//     measures enqueue → start of those tasks and how many tasks the big group got
//     while they went out (one turn per round: about Fair.SmallTasks).
//   - spread: Fair.Spread due tasks, in groups of Fair.SpreadDepth and then in
//     one group, each bulk-loaded before serve starts: serve's and PostgreSQL's CPU
//     while no worker polls (the dispatcher alone), then the drain's throughput
//     and, as it starts, enqueue → start of fairProbes tasks, each in a new
//     group (the dispatcher's reach).
//   - e1: E1's drain (Fair.E1Tasks no-op tasks, Fair.E1Layout) on a plain queue
//     and on a fair queue whose tasks are all in one group, one after the other
//     (the order alternating from run to run), and the ratio of their throughputs.

// fairProbes are the spread part's probe tasks, sent one every fairProbeEvery.
const (
	fairProbes     = 50
	fairProbeEvery = 100 * time.Millisecond
)

// FairConfig sizes the fair experiment.
type FairConfig struct {
	// Backlog is the big group's due tasks in the backlog part. Defaults to 1,000,000.
	Backlog int `json:"backlog"`
	// SmallGroups enqueue SmallTasks tasks each beside the backlog. Default 100 and 10.
	SmallGroups int `json:"small_groups"`
	SmallTasks  int `json:"small_tasks"`
	// Spread is the due tasks of the spread part (in Spread / SpreadDepth groups,
	// then in one). Defaults to 100,000.
	Spread int `json:"spread"`
	// SpreadDepth is the tasks of each of the spread part's many groups: with more
	// than 1, every group holds a buffered head and pending tasks behind it (the
	// dispatcher's steady state). Defaults to 1.
	SpreadDepth int `json:"spread_depth"`
	// Layout drains the backlog and spread parts. Defaults to 4x16.
	Layout Layout `json:"layout"`
	// IdleWindow is the spread part's window without workers. Defaults to 10s.
	IdleWindow time.Duration `json:"idle_window_ns"`
	// E1Tasks and E1Layout size the e1 part. Defaults: 5,000 tasks, 4x16.
	E1Tasks  int    `json:"e1_tasks"`
	E1Layout Layout `json:"e1_layout"`
	// Parts are the parts to run, among FairParts. Defaults to all of them.
	Parts []string `json:"parts"`
}

// FairParts are the fair experiment's parts, in the order they run.
var FairParts = []string{"backlog", "spread", "e1"}

// runs reports whether part is among c.Parts.
func (c FairConfig) runs(part string) bool { return slices.Contains(c.Parts, part) }

func (c *FairConfig) defaults() {
	if c.Backlog == 0 {
		c.Backlog = 1_000_000
	}
	if c.SmallGroups == 0 {
		c.SmallGroups = 100
	}
	if c.SmallTasks == 0 {
		c.SmallTasks = 10
	}
	if c.Spread == 0 {
		c.Spread = 100_000
	}
	if c.SpreadDepth == 0 {
		c.SpreadDepth = 1
	}
	if c.Layout.Procs == 0 {
		c.Layout = Layout{Procs: 4, Concurrency: 16}
	}
	if c.IdleWindow == 0 {
		c.IdleWindow = 10 * time.Second
	}
	if c.E1Tasks == 0 {
		c.E1Tasks = 5000
	}
	if c.E1Layout.Procs == 0 {
		c.E1Layout = Layout{Procs: 4, Concurrency: 16}
	}
	if len(c.Parts) == 0 {
		c.Parts = FairParts
	}
}

// FairBacklogResult is one backlog step.
type FairBacklogResult struct {
	Step
	Layout      Layout  `json:"layout"`
	Backlog     int     `json:"backlog"`
	SmallGroups int     `json:"small_groups"`
	SmallTasks  int     `json:"small_tasks"`
	LoadSeconds float64 `json:"load_s"`
	// Receipt is the small groups' tasks.created_at → first attempt's start, and
	// its steps: the enqueue request's own time (created_at → its answer on the
	// harness's clock, the tasks' commit and buffering), then answer → start
	// (the group's turns, the workers' polls and the claims' commits).
	Receipt       Dist `json:"receipt"`
	EnqueueAnswer Dist `json:"enqueue_answer"`
	AnswerToStart Dist `json:"answer_to_start"`
	// FirstTurn is, per small group, the receipt of its first task to start (its
	// first turn); LastTurn of its last.
	FirstTurn Dist `json:"first_turn"`
	LastTurn  Dist `json:"last_turn"`
	// EnqueueSeconds runs from the first small group's enqueue to the last one's.
	EnqueueSeconds float64 `json:"enqueue_s"`
	// ClaimGaps is the spacing of the claims' commits in the window (the gaps
	// between consecutive distinct attempt starts: a claim statement starts all
	// its attempts at its transaction's time).
	ClaimGaps Dist `json:"claim_gaps"`
	// BigTurns is, per small group, how many tasks the big group started between
	// the group's enqueue and its last task's start (turns promise about
	// SmallTasks, plus what was already popped).
	BigTurns Dist `json:"big_turns"`
	// WindowSeconds runs from the first small task's enqueue to the last one's
	// start; Handouts are the attempts started in it, Throughput Handouts /
	// WindowSeconds.
	WindowSeconds float64 `json:"window_s"`
	Handouts      int     `json:"handouts"`
	Throughput    float64 `json:"throughput"`
	// RoundMs is one round of turns (every small group and the big one once) at
	// Throughput: (SmallGroups + 1) / Throughput.
	RoundMs float64 `json:"round_ms"`
}

// FairSpreadResult is one spread step: Tasks due tasks in Groups groups.
type FairSpreadResult struct {
	Step
	Layout      Layout  `json:"layout"`
	Tasks       int     `json:"tasks"`
	Groups      int     `json:"groups"`
	LoadSeconds float64 `json:"load_s"`
	// SettleCPU runs from serve's start, with no worker, until the load's one-off
	// work is done: the dispatcher has buffered what it buffers (the buffered count
	// held still for fairQuietFor) and the fold has no delta left. SettleSeconds is
	// its length; the CPU-seconds are its serve, PostgreSQL and Redis shares.
	SettleCPU             CPUSplit `json:"settle_cpu"`
	SettleSeconds         float64  `json:"settle_s"`
	SettleServeSeconds    float64  `json:"settle_serve_cpu_s"`
	SettlePostgresSeconds float64  `json:"settle_postgres_cpu_s"`
	SettleRedisSeconds    float64  `json:"settle_redis_cpu_s"`
	// SettleAutovacuumSeconds is PostgreSQL's autovacuum in the step's database
	// (not in SettlePostgresSeconds): it follows the rows the load wrote, and
	// starts when PostgreSQL's naptime says, in either window.
	SettleAutovacuumSeconds float64 `json:"settle_autovacuum_cpu_s"`
	// Buffered is the tasks buffered when settled.
	Buffered int `json:"buffered"`
	// IdleCPU is the steady window after settling, still without workers and
	// without any query of the harness; the cores are its serve, PostgreSQL (the
	// step's backends) and Redis shares.
	IdleCPU           CPUSplit `json:"idle_cpu"`
	IdleServeCores    float64  `json:"idle_serve_cores"`
	IdlePostgresCores float64  `json:"idle_postgres_cores"`
	IdleRedisCores    float64  `json:"idle_redis_cores"`
	// IdleAutovacuumCores is the autovacuum workers' share (not in IdlePostgresCores).
	IdleAutovacuumCores float64 `json:"idle_autovacuum_cores"`
	// Throughput is Tasks / (last finish − first start) of the drain.
	Throughput float64 `json:"throughput"`
	// StartToFirstStartMs is from the workers' start (the processes exec'd) to the
	// first task's start.
	StartToFirstStartMs float64 `json:"start_to_first_start_ms"`
	// Probe is enqueue → start of the probe tasks (one each in a new group), and
	// ProbeBuffered enqueue → buffered (dispatched_at: the dispatch machinery's
	// part; the rest is the group's turn).
	Probe         Dist `json:"probe"`
	ProbeBuffered Dist `json:"probe_buffered"`
	// DrainWait is, for the drain's loaded tasks, the workers' start → each
	// task's first start (the tasks were all due before it).
	DrainWait Dist `json:"drain_wait"`
}

// FairE1Result is one run of the e1 part: the same drain on a plain queue and on
// a fair queue with one group.
type FairE1Result struct {
	Run    int         `json:"run"`
	Plain  DrainResult `json:"plain"`
	Fair   DrainResult `json:"fair"`
	Ratio  float64     `json:"ratio"` // Fair.Throughput / Plain.Throughput
	Error  string      `json:"error,omitempty"`
	First  string      `json:"first"` // "plain" or "fair": which ran first
	Layout Layout      `json:"layout"`
}

// fair runs the three parts of the fair experiment once.
func (r *runner) fair(ctx context.Context, run int) error {
	c := r.cfg.Fair
	if c.runs("backlog") {
		res, err := r.fairBacklog(ctx, run)
		r.report.FairBacklog = append(r.report.FairBacklog, res)
		if err != nil {
			return err
		}
	}
	if c.runs("spread") {
		// Many groups first in odd runs, one group first in even ones.
		many := max(1, c.Spread/c.SpreadDepth)
		order := []int{many, 1}
		if run%2 == 0 {
			order = []int{1, many}
		}
		for _, groups := range order {
			res, err := r.fairSpread(ctx, run, groups)
			r.report.FairSpread = append(r.report.FairSpread, res)
			if err != nil {
				return err
			}
		}
	}
	if !c.runs("e1") {
		return nil
	}
	e1, err := r.fairE1(ctx, run)
	r.report.FairE1 = append(r.report.FairE1, e1)
	return err
}

// Settling: the spread part's steady idle window starts once the load's one-off
// work is done. The step is settled when, at fairQuietPolls polls fairQuietEvery
// apart in a row, the fold had no delta left and the queue's buffered count had
// not moved: longer than the dispatcher's sweep (5 s), which is what tops up a
// queue that no wake-up names; it fails after fairSettleMax.
const (
	fairQuietEvery = time.Second
	fairQuietPolls = 8
	fairSettleMax  = 8 * time.Minute
)

// waitFairQuiet waits until queue's step is settled (above) and returns its
// buffered count then.
func (s *step) waitFairQuiet(ctx context.Context, queue string) (int, error) {
	deadline := time.Now().Add(fairSettleMax)
	last, quiet := -1, 0
	for {
		var deltas, buffered int
		qctx, cancel := context.WithTimeout(ctx, opTimeout)
		err := s.pool.QueryRow(qctx, fairSettling, queue).Scan(&deltas, &buffered)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("wait for the load's work to settle: %w", err)
		}
		if deltas == 0 && buffered == last {
			quiet++
		} else {
			quiet = 0
		}
		last = buffered
		if quiet >= fairQuietPolls {
			return buffered, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("not settled after %s: %d deltas to fold, %d buffered", fairSettleMax, deltas, buffered)
		}
		if err := pause(ctx, fairQuietEvery); err != nil {
			return 0, err
		}
	}
}

// msList runs query, whose rows are one float8 each (milliseconds).
func (s *step) msList(ctx context.Context, query string, args ...any) ([]float64, error) {
	qctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	rows, err := s.pool.Query(qctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[float64])
}

// fairBigGroup is the backlog part's big group.
const fairBigGroup = "g0"

// newFairStep is a prepared step with one fair queue named after it holding tasks
// due tasks in groups groups (g0 … g<groups−1>, round robin over the rows),
// bulk-loaded before serve starts.
func (r *runner) newFairStep(ctx context.Context, name, label string, tasks, groups int, st *Step, loadSeconds *float64) (*step, error) {
	return r.newPreparedStep(ctx, name, func(ctx context.Context, s *step) error {
		st.Database, st.RedisPrefix = s.dbName, s.prefix
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		_, err := s.pool.Exec(cctx, fairInsertQueue, name)
		cancel()
		if err != nil {
			return fmt.Errorf("insert the queue: %w", err)
		}
		start := time.Now()
		if err := r.loadGroupedRows(ctx, s, name, tasks, groups, label); err != nil {
			return err
		}
		*loadSeconds = time.Since(start).Seconds()
		r.prog.update(true, "%s: VACUUM ANALYZE", label)
		return s.vacuumAndCount(ctx, tasks)
	})
}

// loadGroupedRows inserts m pending tasks into queue in groups groups,
// scaleChunk rows per statement, scaleLoaders statements at once.
func (r *runner) loadGroupedRows(ctx context.Context, s *step, queue string, m, groups int, label string) error {
	var base time.Time
	if err := s.pool.QueryRow(ctx, dbNow).Scan(&base); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan [2]int)
	var (
		mu       sync.Mutex
		loaded   int
		firstErr error
		wg       sync.WaitGroup
	)
	for range scaleLoaders {
		wg.Go(func() {
			for ch := range chunks {
				cctx, ccancel := context.WithTimeout(ctx, opTimeout)
				_, err := s.pool.Exec(cctx, fairInsertRows, queue, ch[0], ch[1], base, m, groups)
				ccancel()
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("load rows %d–%d: %w", ch[0], ch[1], err)
					cancel()
				}
				loaded += ch[1] - ch[0] + 1
				r.prog.update(false, "%s: loaded %d/%d rows", label, loaded, m)
				mu.Unlock()
			}
		})
	}
feed:
	for lo := 1; lo <= m; lo += scaleChunk {
		select {
		case chunks <- [2]int{lo, min(lo+scaleChunk-1, m)}:
		case <-ctx.Done():
			break feed
		}
	}
	close(chunks)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// fairBacklog runs the backlog part.
func (r *runner) fairBacklog(ctx context.Context, run int) (res FairBacklogResult, err error) {
	c := r.cfg.Fair
	name := fmt.Sprintf("fair-backlog-r%d", run)
	label := fmt.Sprintf("fair backlog of %d run %d", c.Backlog, run)
	res = FairBacklogResult{Step: Step{Experiment: ExpFair, Run: run, LoadAvg: loadAvg()}, Layout: c.Layout,
		Backlog: c.Backlog, SmallGroups: c.SmallGroups, SmallTasks: c.SmallTasks}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: %w", label, err)
			res.Error = err.Error()
		}
	}()
	r.prog.update(true, "%s: loading", label)
	s, err := r.newFairStep(ctx, name, label, c.Backlog, 1, &res.Step, &res.LoadSeconds)
	if err != nil {
		return res, err
	}
	defer s.close()
	workers, _, err := s.startWorkers(ctx, c.Layout, "noop", "w")
	if err != nil {
		return res, err
	}
	// Let the backlog flow first: the small groups arrive beside a busy big group.
	flowing := min(c.Backlog, 2000)
	if err := s.waitTerminal(ctx, "backlog flowing", name, flowing, workers, nil); err != nil {
		return res, err
	}
	r.prog.update(true, "%s: %d groups enqueue %d tasks each", label, c.SmallGroups, c.SmallTasks)
	var ids []string
	var from time.Time
	if err := s.pool.QueryRow(ctx, dbNow).Scan(&from); err != nil {
		return res, err
	}
	answered := map[string]time.Time{} // group → its enqueue's answer
	for g := range c.SmallGroups {
		batch := make([]client.NewTask, c.SmallTasks)
		for i := range batch {
			batch[i] = client.NewTask{Payload: map[string]any{}, Group: fmt.Sprintf("small-%03d", g)}
		}
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		created, err := s.api.EnqueueBatchMinimal(cctx, name, batch)
		cancel()
		if err != nil {
			return res, fmt.Errorf("enqueue group %d: %w", g, err)
		}
		answered[batch[0].Group] = time.Now()
		ids = append(ids, created...)
	}
	if err := s.waitCount(ctx, "small groups' tasks started", fairStartedOf, []any{ids}, len(ids), stallTimeout, workers, nil); err != nil {
		return res, err
	}
	if err := s.smallSteps(ctx, ids, answered, &res); err != nil {
		return res, err
	}
	var to time.Time
	if err := s.pool.QueryRow(ctx, fairLastStart, ids).Scan(&to); err != nil {
		return res, fmt.Errorf("read the last start: %w", err)
	}
	if err := s.pool.QueryRow(ctx, fairHandouts, name, from, to).Scan(&res.Handouts); err != nil {
		return res, fmt.Errorf("count the handouts: %w", err)
	}
	rows, err := s.pool.Query(ctx, fairBigTurns, ids, name, fairBigGroup)
	if err != nil {
		return res, fmt.Errorf("count the big group's turns: %w", err)
	}
	var turns []float64
	for rows.Next() {
		var n float64
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return res, err
		}
		turns = append(turns, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	res.BigTurns = distOf(turns)
	gaps, err := s.msList(ctx, fairClaimGaps, name, from, to)
	if err != nil {
		return res, fmt.Errorf("read the claims' spacing: %w", err)
	}
	res.ClaimGaps = distOf(gaps)
	res.WindowSeconds = to.Sub(from).Seconds()
	if res.WindowSeconds > 0 {
		res.Throughput = float64(res.Handouts) / res.WindowSeconds
		res.RoundMs = float64(c.SmallGroups+1) / res.Throughput * 1000
	}
	r.prog.println(fmt.Sprintf("%s: small groups' enqueues over %.0f ms; enqueue → its answer p50 %.1f p99 %.1f ms, answer → start p50 %.1f p99 %.1f ms; a group's first turn p50 %.1f p99 %.1f ms, its last p50 %.1f p99 %.1f ms; claims' commits %.1f ms apart (p50), p99 %.1f, max %.1f",
		label, res.EnqueueSeconds*1000, res.EnqueueAnswer.P50, res.EnqueueAnswer.P99, res.AnswerToStart.P50, res.AnswerToStart.P99,
		res.FirstTurn.P50, res.FirstTurn.P99, res.LastTurn.P50, res.LastTurn.P99, res.ClaimGaps.P50, res.ClaimGaps.P99, res.ClaimGaps.Max))
	r.prog.println(fmt.Sprintf("%s: small groups' tasks enqueue → start p50 %.1f ms, p99 %.1f ms; the big group's starts while a small group's went out p50 %.0f, max %.0f (%.0f tasks/s, a round %.0f ms) (load %.2f)",
		label, res.Receipt.P50, res.Receipt.P99, res.BigTurns.P50, res.BigTurns.Max, res.Throughput, res.RoundMs, res.LoadAvg[0]))
	return res, nil
}

// smallSteps reads where the small groups' tasks (ids) spent their time into res;
// answered holds each group's enqueue answer (the harness and PostgreSQL share the
// machine's clock).
func (s *step) smallSteps(ctx context.Context, ids []string, answered map[string]time.Time, res *FairBacklogResult) error {
	rows, err := s.pool.Query(ctx, fairSmallSteps, ids)
	if err != nil {
		return fmt.Errorf("read the small groups' steps: %w", err)
	}
	defer rows.Close()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	var receipt, answer, toStart, first []float64
	type start struct {
		place int
		ms    float64
	}
	last := map[string]start{}
	var firstEnqueue, lastEnqueue time.Time
	for rows.Next() {
		var group string
		var place int
		var created, started time.Time
		var dispatched *time.Time
		if err := rows.Scan(&group, &place, &created, &dispatched, &started); err != nil {
			return err
		}
		total := ms(started.Sub(created))
		receipt = append(receipt, total)
		if a, ok := answered[group]; ok {
			answer, toStart = append(answer, ms(a.Sub(created))), append(toStart, ms(started.Sub(a)))
		}
		if place == 1 {
			first = append(first, total)
		}
		if place > last[group].place {
			last[group] = start{place, total}
		}
		if firstEnqueue.IsZero() || created.Before(firstEnqueue) {
			firstEnqueue = created
		}
		lastEnqueue = later(lastEnqueue, created)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var lasts []float64
	for _, l := range last {
		lasts = append(lasts, l.ms)
	}
	res.Receipt, res.EnqueueAnswer, res.AnswerToStart = distOf(receipt), distOf(answer), distOf(toStart)
	res.FirstTurn, res.LastTurn = distOf(first), distOf(lasts)
	res.EnqueueSeconds = lastEnqueue.Sub(firstEnqueue).Seconds()
	return nil
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// receipts reads enqueue → first start of ids, in ms.
func receipts(ctx context.Context, s *step, ids []string) ([]float64, error) {
	rows, err := s.pool.Query(ctx, receiptLatencies, ids)
	if err != nil {
		return nil, fmt.Errorf("read the receipts: %w", err)
	}
	defer rows.Close()
	var out []float64
	for rows.Next() {
		var receipt, finish float64
		var done bool
		if err := rows.Scan(&receipt, &finish, &done); err != nil {
			return nil, err
		}
		out = append(out, receipt)
	}
	return out, rows.Err()
}

// fairSpread runs one spread step: c.Spread due tasks in groups groups.
func (r *runner) fairSpread(ctx context.Context, run, groups int) (res FairSpreadResult, err error) {
	c := r.cfg.Fair
	name := fmt.Sprintf("fair-spread-g%d-r%d", groups, run)
	label := fmt.Sprintf("fair %d tasks in %d groups run %d", c.Spread, groups, run)
	res = FairSpreadResult{Step: Step{Experiment: ExpFair, Run: run, LoadAvg: loadAvg()}, Layout: c.Layout,
		Tasks: c.Spread, Groups: groups}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: %w", label, err)
			res.Error = err.Error()
		}
	}()
	r.prog.update(true, "%s: loading", label)
	s, err := r.newFairStep(ctx, name, label, c.Spread, groups, &res.Step, &res.LoadSeconds)
	if err != nil {
		return res, err
	}
	defer s.close()
	r.prog.update(true, "%s: settling (no worker), then an idle window of %s", label, c.IdleWindow)
	tracker, err := s.sampler.track()
	if err != nil {
		return res, err
	}
	settled := time.Now()
	res.Buffered, err = s.waitFairQuiet(ctx, name)
	if err != nil {
		_, _ = tracker.finish(runtime.NumCPU())
		return res, err
	}
	res.SettleSeconds = time.Since(settled).Seconds()
	if res.SettleCPU, err = tracker.finish(runtime.NumCPU()); err != nil {
		return res, err
	}
	res.SettleServeSeconds = res.SettleCPU.Seconds[cpuServe]
	res.SettlePostgresSeconds = res.SettleCPU.Seconds[cpuPGBench]
	res.SettleRedisSeconds = res.SettleCPU.Seconds[cpuRedis]
	res.SettleAutovacuumSeconds = res.SettleCPU.Seconds[cpuPGAutovac]
	if tracker, err = s.sampler.track(); err != nil {
		return res, err
	}
	if err := pause(ctx, c.IdleWindow); err != nil {
		_, _ = tracker.finish(runtime.NumCPU())
		return res, err
	}
	if res.IdleCPU, err = tracker.finish(runtime.NumCPU()); err != nil {
		return res, err
	}
	res.IdleServeCores = res.IdleCPU.cores(cpuServe)
	res.IdlePostgresCores = res.IdleCPU.cores(cpuPGBench)
	res.IdleRedisCores = res.IdleCPU.cores(cpuRedis)
	res.IdleAutovacuumCores = res.IdleCPU.cores(cpuPGAutovac)

	var ready time.Time
	if err := s.pool.QueryRow(ctx, dbNow).Scan(&ready); err != nil {
		return res, err
	}
	workers, _, err := s.startWorkers(ctx, c.Layout, "noop", "w")
	if err != nil {
		return res, err
	}
	// Probes: fairProbes tasks, each in a new group, one every fairProbeEvery from
	// the drain's start.
	var probes []string
	for i := range fairProbes {
		if err := pause(ctx, fairProbeEvery); err != nil {
			return res, err
		}
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		created, err := s.api.EnqueueBatchMinimal(cctx, name, []client.NewTask{{Payload: map[string]any{}, Group: fmt.Sprintf("probe-%d", i)}})
		cancel()
		if err != nil {
			return res, fmt.Errorf("enqueue a probe: %w", err)
		}
		probes = append(probes, created...)
	}
	err = s.waitTerminal(ctx, "drain", name, c.Spread+len(probes), workers, func(n int) {
		r.prog.update(false, "%s: %d/%d done", label, n, c.Spread+len(probes))
	})
	if err != nil {
		return res, err
	}
	var done int
	var first, last time.Time
	if err := s.pool.QueryRow(ctx, fairDrainWindow, name).Scan(&done, &first, &last); err != nil {
		return res, fmt.Errorf("read the drain: %w", err)
	}
	if secs := last.Sub(first).Seconds(); secs > 0 {
		res.Throughput = float64(done) / secs
	}
	res.StartToFirstStartMs = float64(first.Sub(ready).Microseconds()) / 1000
	probe, err := receipts(ctx, s, probes)
	if err != nil {
		return res, err
	}
	res.Probe = distOf(probe)
	buffered, err := s.msList(ctx, fairBufferedLatencies, probes)
	if err != nil {
		return res, fmt.Errorf("read the probes' dispatch: %w", err)
	}
	res.ProbeBuffered = distOf(buffered)
	wait, err := s.msList(ctx, fairDrainWaits, name, ready, probes)
	if err != nil {
		return res, fmt.Errorf("read the drain's waits: %w", err)
	}
	res.DrainWait = distOf(wait)
	r.prog.println(fmt.Sprintf("%s: settling %.1f s, serve %.2f + PostgreSQL %.2f (autovacuum %.2f) + Redis %.2f CPU-s; then idle serve %.3f + PostgreSQL %.3f (autovacuum %.3f) + Redis %.3f cores; drain %.0f tasks/s, wait p50 %.0f ms p99 %.0f ms; a new group's task enqueue → buffered p50 %.1f ms p99 %.1f ms, → start p50 %.1f ms p99 %.1f ms (load %.2f)",
		label, res.SettleSeconds, res.SettleServeSeconds, res.SettlePostgresSeconds, res.SettleAutovacuumSeconds, res.SettleRedisSeconds,
		res.IdleServeCores, res.IdlePostgresCores, res.IdleAutovacuumCores, res.IdleRedisCores, res.Throughput, res.DrainWait.P50, res.DrainWait.P99,
		res.ProbeBuffered.P50, res.ProbeBuffered.P99, res.Probe.P50, res.Probe.P99, res.LoadAvg[0]))
	return res, nil
}

// fairE1 runs E1's drain on a plain queue and on a fair queue with one group, in
// an order that alternates from run to run.
func (r *runner) fairE1(ctx context.Context, run int) (res FairE1Result, err error) {
	c := r.cfg.Fair
	res = FairE1Result{Run: run, Layout: c.E1Layout, First: "plain"}
	fairness := "round_robin"
	plain := func() error {
		d, err := r.drain(ctx, drainSpec{exp: "fair-e1-plain", run: run, layout: c.E1Layout, tasks: c.E1Tasks, warmup: 500,
			handler: "noop", payload: map[string]any{}})
		res.Plain = d
		return err
	}
	fair := func() error {
		d, err := r.drain(ctx, drainSpec{exp: "fair-e1-fair", run: run, layout: c.E1Layout, tasks: c.E1Tasks, warmup: 500,
			handler: "noop", payload: map[string]any{}, group: "tenant",
			queue: client.QueueSettings{Fairness: client.Set(fairness)}})
		res.Fair = d
		return err
	}
	order := []func() error{plain, fair}
	if run%2 == 0 {
		order, res.First = []func() error{fair, plain}, "fair"
	}
	for _, f := range order {
		if err := f(); err != nil {
			res.Error = err.Error()
			return res, err
		}
	}
	if res.Plain.Throughput > 0 {
		res.Ratio = res.Fair.Throughput / res.Plain.Throughput
	}
	r.prog.println(fmt.Sprintf("fair e1 %s run %d: fair queue, one group %.0f tasks/s, plain %.0f: %.2f×",
		c.E1Layout, run, res.Fair.Throughput, res.Plain.Throughput, res.Ratio))
	return res, nil
}

// writeFair writes the fair experiment's tables, per run.
func (r *Report) writeFair(w io.Writer) error {
	if len(r.FairBacklog)+len(r.FairSpread)+len(r.FairE1) == 0 {
		return nil
	}
	if err := r.writeFairBacklog(w); err != nil {
		return err
	}
	if err := r.writeFairSpread(w); err != nil {
		return err
	}
	return r.writeFairE1(w)
}

// fairRow is one row of a fair table: the columns that name it (tab-separated),
// then its figures, or why it failed.
type fairRow struct {
	key, figures, failed string
}

// writeFairTable writes one part's table, if it has results: its title, the
// header's columns (tab-separated) and a row of each result.
func writeFairTable[T any](w io.Writer, title, header string, results []T, row func(T) fairRow) error {
	if len(results) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\n"+title)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\t\n", header)
	for _, res := range results {
		r := row(res)
		if r.failed != "" {
			fmt.Fprintf(tw, "%s\tfailed: %s\t\n", r.key, r.failed)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t\n", r.key, r.figures)
		}
	}
	return tw.Flush()
}

// writeFairBacklog writes the backlog part's table, if it ran.
func (r *Report) writeFairBacklog(w io.Writer) error {
	row := func(b FairBacklogResult) fairRow {
		return fairRow{key: fmt.Sprintf("%d\t%d", b.Run, b.Backlog), failed: b.Error,
			figures: fmt.Sprintf("%dx%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t%.1f", b.SmallGroups, b.SmallTasks,
				b.Receipt.P50, b.Receipt.P99, b.Receipt.Max, b.EnqueueAnswer.P99, b.AnswerToStart.P99, b.ClaimGaps.Max,
				b.BigTurns.P50, b.BigTurns.Max, b.Throughput, b.RoundMs, b.LoadAvg[0])}
	}
	return writeFairTable(w, "Fair queue, a backlog beside small groups (small groups' tasks: tasks.created_at → first start;"+
		" → answer: the enqueue's own time; answer → start: the wait for a pop and the claim's commit; claims' gap: the longest between two claims' commits)",
		"run\tbacklog\tsmall\tp50 ms\tp99 ms\tmax ms\t→ answer p99\tanswer → start p99\tclaims' gap\tbig's turns p50\tmax\ttasks/s\tround ms\tload1", r.FairBacklog, row)
}

// writeFairSpread writes the spread part's table, if it ran.
func (r *Report) writeFairSpread(w io.Writer) error {
	row := func(s FairSpreadResult) fairRow {
		return fairRow{key: fmt.Sprintf("%d\t%d\t%d", s.Run, s.Tasks, s.Groups), failed: s.Error,
			figures: fmt.Sprintf("%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\t%.3f\t%.3f\t%.3f\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f",
				s.SettleSeconds, s.SettleServeSeconds, s.SettlePostgresSeconds, s.SettleRedisSeconds, s.SettleAutovacuumSeconds, s.IdleServeCores,
				s.IdlePostgresCores, s.IdleRedisCores, s.IdleAutovacuumCores, s.Throughput, s.DrainWait.P50, s.DrainWait.P99,
				s.ProbeBuffered.P50, s.ProbeBuffered.P99, s.Probe.P50, s.Probe.P99, s.LoadAvg[0])}
	}
	return writeFairTable(w, "Fair queue, due tasks in many groups or one (settle: serve's start until the dispatcher and the fold are quiet, CPU-s;"+
		" idle: steady after it, cores; no worker polls in either; drain wait: workers' start → a task's start; probe: a new group's task during the drain, → buffered and → start)",
		"run\ttasks\tgroups\tsettle s\tserve s\tpg s\tredis s\tautovac s\tidle serve\tidle pg\tidle redis\tidle autovac\ttasks/s\twait p50\twait p99\tbuffered p50\tp99\tprobe p50\tprobe p99\tload1", r.FairSpread, row)
}

// writeFairE1 writes the e1 part's table, if it ran.
func (r *Report) writeFairE1(w io.Writer) error {
	row := func(e FairE1Result) fairRow {
		return fairRow{key: fmt.Sprintf("%d\t%s", e.Run, e.Layout), failed: e.Error,
			figures: fmt.Sprintf("%s\t%.0f\t%.0f\t%.2f\t%.1f", e.First, e.Plain.Throughput, e.Fair.Throughput, e.Ratio, e.Plain.LoadAvg[0])}
	}
	return writeFairTable(w, "Fair queue with one group against a plain queue, E1's drain, one after the other",
		"run\tlayout\tfirst\tplain tasks/s\tfair tasks/s\tfair/plain\tload1", r.FairE1, row)
}
