package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// SchemaVersion is the version of the JSON report's layout.
const SchemaVersion = 1

// Report is everything one Run measured. Times come from the database clock unless
// a field says otherwise.
type Report struct {
	SchemaVersion int       `json:"schema_version"`
	StartedAt     time.Time `json:"started_at"`
	FinishedAt    time.Time `json:"finished_at"`
	Config        Config    `json:"config"`
	Machine       Machine   `json:"machine"`

	E1      []DrainResult    `json:"e1,omitempty"`
	E2      []DrainResult    `json:"e2,omitempty"`
	Latency []LatencyResult  `json:"latency,omitempty"`
	Enqueue []EnqueueResult  `json:"enqueue,omitempty"`
	E5      []RetryResult    `json:"e5,omitempty"`
	E6      []RecoveryResult `json:"e6,omitempty"`

	// ScaleQueues and ScaleRows are the scale experiment's two curves, one
	// result per point.
	ScaleQueues []ScaleQueuesResult `json:"scale_queues,omitempty"`
	ScaleRows   []ScaleRowsResult   `json:"scale_rows,omitempty"`

	// FairBacklog, FairSpread and FairE1 are the fair experiment's parts.
	FairBacklog []FairBacklogResult `json:"fair_backlog,omitempty"`
	FairSpread  []FairSpreadResult  `json:"fair_spread,omitempty"`
	FairE1      []FairE1Result      `json:"fair_e1,omitempty"`

	Medians  []Median `json:"medians,omitempty"`
	Problems []string `json:"problems,omitempty"` // failed checks; empty when all passed
}

// Machine describes where the figures were taken.
type Machine struct {
	Hostname  string `json:"hostname"`
	Cores     int    `json:"cores"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	Revision  string `json:"revision,omitempty"` // VCS revision of the binary, "+dirty" when modified
	Postgres  string `json:"postgres"`
	// PostgresSettings are the server's values of reportedSettings
	// (autovacuum, fsync, shared_buffers, WAL sizing, ...).
	PostgresSettings map[string]string `json:"postgres_settings"`
	Redis            string            `json:"redis"`
	LoadAvgBefore    [3]float64        `json:"loadavg_before"`
	LoadAvgAfter     [3]float64        `json:"loadavg_after"`
}

// Dist summarises samples in milliseconds (nearest-rank percentiles).
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// distOf summarises samples (milliseconds); it sorts them in place.
func distOf(ms []float64) Dist {
	if len(ms) == 0 {
		return Dist{}
	}
	slices.Sort(ms)
	var sum float64
	for _, v := range ms {
		sum += v
	}
	return Dist{N: len(ms), Mean: sum / float64(len(ms)), P50: percentile(ms, 50), P95: percentile(ms, 95),
		P99: percentile(ms, 99), Max: ms[len(ms)-1]}
}

// percentile is the nearest-rank p-th percentile of sorted samples.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Step identifies one measured step.
type Step struct {
	Experiment  string     `json:"experiment"`
	Run         int        `json:"run"`
	Database    string     `json:"database"`     // dropped after the step
	RedisPrefix string     `json:"redis_prefix"` // its keys deleted after the step
	LoadAvg     [3]float64 `json:"loadavg"`      // when the step started
	Error       string     `json:"error,omitempty"`
}

// DrainResult is one drain step of E1, E2 or E5: Tasks enqueued while the queue was
// paused, then drained by Layout.
type DrainResult struct {
	Step
	Layout  Layout `json:"layout"`
	Workers int    `json:"workers"` // Layout.Workers()
	Tasks   int    `json:"tasks"`
	Done    int    `json:"done"` // tasks that ended done
	// FirstStart and LastFinish bound the measured tasks' attempts.
	FirstStart time.Time `json:"first_start"`
	LastFinish time.Time `json:"last_finish"`
	Seconds    float64   `json:"seconds"` // LastFinish − FirstStart
	// ResumeToFirstStartMs is how long after the queue was resumed the first
	// measured task started (dispatch and settings refresh; not in Seconds).
	ResumeToFirstStartMs float64 `json:"resume_to_first_start_ms"`
	Throughput           float64 `json:"throughput"` // Tasks / Seconds
	// PreloadRate is how fast one client enqueued the measured tasks, in batches of
	// client.MaxBatch, one request at a time (tasks/s, harness clock).
	PreloadRate float64 `json:"preload_rate"`
	// Efficiency, for sleeping tasks, is Throughput / (Workers × 1000 / sleep ms).
	Efficiency float64  `json:"efficiency,omitempty"`
	CPU        CPUSplit `json:"cpu"`
	Profile    string   `json:"profile,omitempty"` // serve's CPU profile of the window
}

// LatencyResult is one latency step: tasks enqueued one by one at a steady rate to
// idle long-polling workers.
type LatencyResult struct {
	Step
	Layout     Layout  `json:"layout"`
	TargetRate float64 `json:"target_rate"`
	// AchievedRate is the measured enqueues per second (harness clock).
	AchievedRate float64 `json:"achieved_rate"`
	Tasks        int     `json:"tasks"`
	Done         int     `json:"done"`
	// Receipt is tasks.created_at (the enqueue transaction) → attempts.started_at
	// (the claim transaction that answered a worker's poll).
	Receipt Dist `json:"receipt"`
	// Finish is tasks.created_at → the ack's commit (attempts.finished_at).
	Finish Dist `json:"finish"`
	// Enqueue is the HTTP round trip of each enqueue, on the harness's clock.
	Enqueue Dist     `json:"enqueue_rtt"`
	CPU     CPUSplit `json:"cpu"`
}

// EnqueueResult is one enqueue step: Tasks requests of one producer, each sent
// when the one before was answered, into a queue no worker polls.
type EnqueueResult struct {
	Step
	Tasks int `json:"tasks"`
	// RTT is each request's round trip, on the harness's clock.
	RTT Dist     `json:"rtt"`
	CPU CPUSplit `json:"cpu"`
}

// RetryResult is one E5 step: every task fails once (the `fail` handler with
// fail_times 1), then succeeds after the queue's backoff.
type RetryResult struct {
	DrainResult
	BackoffBaseMs int64 `json:"backoff_base_ms"`
	// HistoriesOK counts tasks whose history is exactly attempt 1 failed, attempt
	// 2 succeeded, and that ended done.
	HistoriesOK int      `json:"histories_ok"`
	Bad         []string `json:"bad,omitempty"` // the first few other histories
	// RetryLag is attempt 1's nack → attempt 2's start (backoff included).
	RetryLag Dist `json:"retry_lag"`
}

// RecoveryResult is one E6 step: victim workers SIGKILLed while holding a task in
// every slot, idle survivors waiting.
type RecoveryResult struct {
	Step
	Variant   LeaseVariant `json:"variant"`
	Victims   Layout       `json:"victims"`
	Survivors Layout       `json:"survivors"`
	Tasks     int          `json:"tasks"`
	// LeaseSeconds is the lease a heartbeat grants, as observed (lease expiry −
	// last heartbeat, median).
	LeaseSeconds float64 `json:"lease_s"`
	// KillDelayMs is how long after the last victim task started the kill came
	// (seeded, uniform within one heartbeat interval).
	KillDelayMs float64 `json:"kill_delay_ms"`
	// ExpiryToReclaim is the abandoned attempt's lease expiry → the watchdog
	// ending it; ExpiryToRedelivery → the next attempt's start; KillToRedelivery
	// is the SIGKILL → the next attempt's start.
	ExpiryToReclaim    Dist `json:"expiry_to_reclaim"`
	ExpiryToRedelivery Dist `json:"expiry_to_redelivery"`
	KillToRedelivery   Dist `json:"kill_to_redelivery"`
	// LateHeartbeats counts leases that moved after the kill (a heartbeat that was
	// in flight); the later expiry is used.
	LateHeartbeats int      `json:"late_heartbeats"`
	HistoriesOK    int      `json:"histories_ok"` // attempt 1 abandoned, attempt 2 succeeded, done
	Bad            []string `json:"bad,omitempty"`
}

// ScaleQueuesResult is one point of the scale experiment's queues curve: Queues
// queues, each holding one task scheduled an hour ahead, and one idle serve.
type ScaleQueuesResult struct {
	Step
	Queues int `json:"queues"`
	// LoadSeconds is the time the harness's bulk insert of the queues and their
	// tasks took (before serve started).
	LoadSeconds float64 `json:"load_s"`
	// IdleCPU is the CPU over the idle window: serve alone, nothing polling.
	IdleCPU CPUSplit `json:"idle_cpu"`
	// ServeCores, PostgresCores (the step database's backends) and
	// PostgresBackgroundCores are IdleCPU's classes divided by its window.
	ServeCores              float64 `json:"serve_cores"`
	PostgresCores           float64 `json:"postgres_cores"`
	PostgresBackgroundCores float64 `json:"postgres_background_cores"`
	// Receipt is just before the enqueue request → the long-polling worker's poll
	// answering with the task, on the harness's clock, one task at a time.
	Receipt Dist `json:"receipt"`
	// Enqueue is each enqueue's HTTP round trip.
	Enqueue Dist `json:"enqueue_rtt"`
	// BaseQueues is the smallest queue count of the run, and P50Ratio this
	// point's receipt p50 over that point's (1 for the base itself; 0 when the
	// base failed).
	BaseQueues int     `json:"base_queues"`
	P50Ratio   float64 `json:"p50_ratio"`
}

// ScaleRowsResult is one point of the scale experiment's rows curve: Rows pending
// tasks in one queue, one serve, one dashboard live-feed client open.
type ScaleRowsResult struct {
	Step
	Rows int `json:"rows"`
	// LoadSeconds is the bulk load of the rows (INSERT … SELECT in chunks, triggers
	// firing), LoadRowsPerSec its rate; VacuumSeconds the VACUUM ANALYZE after it,
	// not in the rate.
	LoadSeconds    float64 `json:"load_s"`
	LoadRowsPerSec float64 `json:"load_rows_per_s"`
	VacuumSeconds  float64 `json:"vacuum_s"`
	// StatsTasks is the sum of the depths GET /queues/:name/stats reported
	// (it should be Rows).
	StatsTasks int64 `json:"stats_tasks"`
	// Stats and Metrics are the round trips of GET /queues/:name/stats (back to
	// back) and GET /metrics (during the window, ScrapeEvery apart).
	Stats   Dist `json:"stats"`
	Metrics Dist `json:"metrics"`
	// MetricsStale counts scrapes whose answer said
	// "taskforge_state_collector_up 0": serve's state snapshot failed or timed
	// out, and the depths it served were old.
	MetricsStale int `json:"metrics_stale"`
	// FeedCompute is each live-feed snapshot's compute_ms as serve reported it
	// (the first refresh excluded); FeedGap the time between two refreshes
	// arriving (about the hub's 1 s interval, or the compute time when longer);
	// FeedProblems counts "problem" events (a snapshot that failed).
	FeedCompute  Dist `json:"feed_compute"`
	FeedGap      Dist `json:"feed_gap"`
	FeedProblems int  `json:"feed_problems"`
	// WindowCPU is the CPU over the window in which the metrics were scraped,
	// with the feed open; the cores are its classes divided by its window.
	WindowCPU               CPUSplit `json:"window_cpu"`
	ServeCores              float64  `json:"serve_cores"`
	PostgresCores           float64  `json:"postgres_cores"`
	PostgresBackgroundCores float64  `json:"postgres_background_cores"`
}

// Median is the median over runs of one figure of one configuration.
type Median struct {
	Experiment string    `json:"experiment"`
	Config     string    `json:"config"` // layout or variant
	Metric     string    `json:"metric"`
	Runs       int       `json:"runs"`
	Median     float64   `json:"median"`
	Values     []float64 `json:"values"` // in run order
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// computeMedians fills r.Medians from the runs.
func (r *Report) computeMedians() {
	type key struct{ exp, cfg, metric string }
	var order []key
	vals := map[key][]float64{}
	add := func(exp, cfg, metric string, v float64) {
		k := key{exp, cfg, metric}
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = append(vals[k], v)
	}
	for _, d := range r.E1 {
		if d.Error == "" {
			add(ExpNoop, d.Layout.String(), "throughput", d.Throughput)
		}
	}
	for _, d := range r.E2 {
		if d.Error == "" {
			add(ExpSleep, d.Layout.String(), "throughput", d.Throughput)
			add(ExpSleep, d.Layout.String(), "efficiency", d.Efficiency)
		}
	}
	for _, l := range r.Latency {
		if l.Error == "" {
			cfg := l.Layout.String()
			add(ExpLatency, cfg, "p50_ms", l.Receipt.P50)
			add(ExpLatency, cfg, "p95_ms", l.Receipt.P95)
			add(ExpLatency, cfg, "p99_ms", l.Receipt.P99)
		}
	}
	for _, e := range r.Enqueue {
		if e.Error == "" {
			add(ExpEnqueue, "1 producer", "rtt_p50_ms", e.RTT.P50)
			add(ExpEnqueue, "1 producer", "rtt_p95_ms", e.RTT.P95)
		}
	}
	for _, e := range r.E5 {
		if e.Error == "" {
			add(ExpRetry, e.Layout.String(), "throughput", e.Throughput)
		}
	}
	for _, e := range r.E6 {
		if e.Error == "" {
			add(ExpRecovery, e.Variant.Name, "expiry_to_redelivery_p50_ms", e.ExpiryToRedelivery.P50)
			add(ExpRecovery, e.Variant.Name, "kill_to_redelivery_p50_ms", e.KillToRedelivery.P50)
		}
	}
	for _, q := range r.ScaleQueues {
		if q.Error == "" {
			cfg := fmt.Sprintf("queues=%d", q.Queues)
			add(ExpScale, cfg, "receipt_p50_ms", q.Receipt.P50)
			add(ExpScale, cfg, "idle_serve_cores", q.ServeCores)
			add(ExpScale, cfg, "idle_postgres_cores", q.PostgresCores)
		}
	}
	for _, w := range r.ScaleRows {
		if w.Error == "" {
			cfg := fmt.Sprintf("rows=%d", w.Rows)
			add(ExpScale, cfg, "stats_p50_ms", w.Stats.P50)
			add(ExpScale, cfg, "metrics_p50_ms", w.Metrics.P50)
			add(ExpScale, cfg, "feed_compute_p50_ms", w.FeedCompute.P50)
			add(ExpScale, cfg, "postgres_cores", w.PostgresCores)
		}
	}
	for _, b := range r.FairBacklog {
		if b.Error == "" {
			cfg := fmt.Sprintf("backlog=%d", b.Backlog)
			add(ExpFair, cfg, "small_receipt_p50_ms", b.Receipt.P50)
			add(ExpFair, cfg, "small_receipt_p99_ms", b.Receipt.P99)
			add(ExpFair, cfg, "big_turns_max", b.BigTurns.Max)
		}
	}
	for _, s := range r.FairSpread {
		if s.Error == "" {
			cfg := fmt.Sprintf("tasks=%d groups=%d", s.Tasks, s.Groups)
			add(ExpFair, cfg, "idle_serve_cores", s.IdleServeCores)
			add(ExpFair, cfg, "idle_postgres_cores", s.IdlePostgresCores)
			add(ExpFair, cfg, "throughput", s.Throughput)
			add(ExpFair, cfg, "probe_p50_ms", s.Probe.P50)
		}
	}
	for _, e := range r.FairE1 {
		if e.Error == "" {
			add(ExpFair, "e1 "+e.Layout.String(), "fair_over_plain", e.Ratio)
		}
	}
	r.Medians = r.Medians[:0]
	for _, k := range order {
		v := vals[k]
		r.Medians = append(r.Medians, Median{Experiment: k.exp, Config: k.cfg, Metric: k.metric,
			Runs: len(v), Median: median(v), Values: v})
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as plain-text tables: medians over the runs (with
// the range), then the CPU split of the median-throughput steps.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	m := r.Machine
	fmt.Fprintf(w, "TaskForge benchmark, %s, %d cores, %s; %s; %s\n", m.Hostname, m.Cores, m.GoVersion,
		firstWords(m.Postgres, 2), "Redis "+m.Redis)
	fmt.Fprintf(w, "load average %.2f %.2f %.2f before, %.2f %.2f %.2f after; seed %d; revision %s\n",
		m.LoadAvgBefore[0], m.LoadAvgBefore[1], m.LoadAvgBefore[2],
		m.LoadAvgAfter[0], m.LoadAvgAfter[1], m.LoadAvgAfter[2], r.Config.Seed, m.Revision)
	fmt.Fprintf(w, "PostgreSQL settings: %s\n", m.settingsLine())
	if r.Config.Language != "" && r.Config.Language != LanguageGo {
		fmt.Fprintf(w, "workers without a protocol: the %s SDK's (%s)\n", r.Config.Language, strings.Join(r.Config.WorkerCommand, " "))
	}
	if len(r.Config.ServeEnv) > 0 {
		fmt.Fprintf(w, "serve ran with %s\n", strings.Join(r.Config.ServeEnv, " "))
	}

	if len(r.E1)+len(r.E2)+len(r.E5) > 0 {
		fmt.Fprintln(w, "\nDrains (throughput = tasks / (last finish − first start), database clock; median [min–max] over runs)")
		p("experiment\tlayout\tworkers\ttasks\truns\ttasks/s\trange\tefficiency\tpreload/s\tload1\t\n")
		for _, set := range []struct {
			name string
			rs   []DrainResult
		}{{ExpNoop, r.E1}, {ExpSleep, r.E2}, {ExpRetry, retryDrains(r.E5)}} {
			for _, g := range groupDrains(set.rs) {
				tp := fieldOf(g, func(d DrainResult) float64 { return d.Throughput })
				eff := ""
				if set.name == ExpSleep {
					eff = fmt.Sprintf("%.0f%%", 100*median(fieldOf(g, func(d DrainResult) float64 { return d.Efficiency })))
				}
				preload := median(fieldOf(g, func(d DrainResult) float64 { return d.PreloadRate }))
				p("%s\t%s\t%d\t%d\t%d\t%.0f\t%.0f–%.0f\t%s\t%.0f\t%.1f\t\n", set.name, g[0].Layout, g[0].Workers, g[0].Tasks,
					len(g), median(tp), slices.Min(tp), slices.Max(tp), eff, preload, median(fieldOf(g, func(d DrainResult) float64 { return d.LoadAvg[0] })))
			}
			for _, d := range set.rs {
				if d.Error != "" {
					p("%s\t%s\t%d\t%d\trun %d\tfailed\t\t\t\t\t\n", set.name, d.Layout, d.Workers, d.Tasks, d.Run)
				}
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if err := r.writeFair(w); err != nil {
		return err
	}
	if len(r.Latency) > 0 {
		fmt.Fprintln(w, "\nLatency (tasks.created_at → attempts.started_at, database clock; per run)")
		p("run\tlayout\trate\ttasks\tp50 ms\tp95 ms\tp99 ms\tmax ms\tto done p50\tenqueue rtt p50\tload1\t\n")
		for _, l := range r.Latency {
			if l.Error != "" {
				p("%d\t%s\tfailed: %s\t\n", l.Run, l.Layout, l.Error)
				continue
			}
			p("%d\t%s\t%.0f/s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", l.Run, l.Layout, l.AchievedRate, l.Tasks,
				l.Receipt.P50, l.Receipt.P95, l.Receipt.P99, l.Receipt.Max, l.Finish.P50, l.Enqueue.P50, l.LoadAvg[0])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Enqueue) > 0 {
		fmt.Fprintln(w, "\nEnqueue (one producer, one task per request, back to back; round trip on the harness's clock)")
		p("run\ttasks\tp50 ms\tp95 ms\tp99 ms\tmax ms\tload1\t\n")
		for _, e := range r.Enqueue {
			if e.Error != "" {
				p("%d\tfailed: %s\t\n", e.Run, e.Error)
				continue
			}
			p("%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t\n", e.Run, e.Tasks, e.RTT.P50, e.RTT.P95, e.RTT.P99, e.RTT.Max, e.LoadAvg[0])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.E5) > 0 {
		fmt.Fprintln(w, "\nE5 fail-once retries (history: attempt 1 failed, attempt 2 succeeded)")
		p("run\tlayout\ttasks\thistories ok\tbackoff base\tretry lag p50 ms\tp95 ms\tmax ms\t\n")
		for _, e := range r.E5 {
			p("%d\t%s\t%d\t%d\t%dms\t%.1f\t%.1f\t%.1f\t\n", e.Run, e.Layout, e.Tasks, e.HistoriesOK, e.BackoffBaseMs,
				e.RetryLag.P50, e.RetryLag.P95, e.RetryLag.Max)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.E6) > 0 {
		fmt.Fprintln(w, "\nE6 hard-kill recovery (database clock; p50 / p95 / max in ms)")
		p("run\tvariant\tlease\ttasks\tok\texpiry→reclaim\texpiry→redelivery\tkill→redelivery\tlate hb\t\n")
		for _, e := range r.E6 {
			if e.Error != "" {
				p("%d\t%s\tfailed: %s\t\n", e.Run, e.Variant.Name, e.Error)
				continue
			}
			d3 := func(d Dist) string { return fmt.Sprintf("%.0f / %.0f / %.0f", d.P50, d.P95, d.Max) }
			p("%d\t%s\t%.1fs\t%d\t%d\t%s\t%s\t%s\t%d\t\n", e.Run, e.Variant.Name, e.LeaseSeconds, e.Tasks, e.HistoriesOK,
				d3(e.ExpiryToReclaim), d3(e.ExpiryToRedelivery), d3(e.KillToRedelivery), e.LateHeartbeats)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if err := r.writeScale(w); err != nil {
		return err
	}
	if err := r.writeCPU(w); err != nil {
		return err
	}
	if len(r.Problems) > 0 {
		fmt.Fprintln(w, "\nPROBLEMS")
		for _, pr := range r.Problems {
			fmt.Fprintln(w, "  -", pr)
		}
	}
	return nil
}

// writeScale writes the scale experiment's two curves, one row per point.
func (r *Report) writeScale(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	if len(r.ScaleQueues) > 0 {
		fmt.Fprintln(w, "\nScale: queues (each with one task due in 1 h; idle CPU in cores; enqueue → long-poll receipt, harness clock)")
		p("queues\tload s\tidle s\tserve\tpostgres\tpg bg\tsamples\tp50 ms\tp95 ms\tmax ms\tp50 ratio\tenqueue rtt p50\tload1\t\n")
		for _, q := range r.ScaleQueues {
			if q.Error != "" {
				p("%d\tfailed: %s\t\n", q.Queues, q.Error)
				continue
			}
			ratio := "–"
			if q.P50Ratio > 0 {
				ratio = fmt.Sprintf("%.2f× of %d", q.P50Ratio, q.BaseQueues)
			}
			p("%d\t%.1f\t%.1f\t%.3f\t%.3f\t%.3f\t%d\t%.1f\t%.1f\t%.1f\t%s\t%.1f\t%.1f\t\n", q.Queues, q.LoadSeconds,
				q.IdleCPU.WindowSeconds, q.ServeCores, q.PostgresCores, q.PostgresBackgroundCores, q.Receipt.N,
				q.Receipt.P50, q.Receipt.P95, q.Receipt.Max, ratio, q.Enqueue.P50, q.LoadAvg[0])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.ScaleRows) > 0 {
		fmt.Fprintln(w, "\nScale: rows (pending tasks in one queue; p50 / p95 ms; CPU in cores over the scrape window, one live feed open)")
		p("rows\tload s\trows/s\tstats tasks\tstats\tmetrics\tstale\tfeed compute\tfeed gap p50\tproblems\twindow s\tserve\tpostgres\tpg bg\tload1\t\n")
		for _, x := range r.ScaleRows {
			if x.Error != "" {
				p("%d\tfailed: %s\t\n", x.Rows, x.Error)
				continue
			}
			d2 := func(d Dist) string { return fmt.Sprintf("%.1f / %.1f", d.P50, d.P95) }
			p("%d\t%.1f\t%.0f\t%d\t%s\t%s\t%d/%d\t%s\t%.0f\t%d\t%.1f\t%.3f\t%.3f\t%.3f\t%.1f\t\n", x.Rows, x.LoadSeconds,
				x.LoadRowsPerSec, x.StatsTasks, d2(x.Stats), d2(x.Metrics), x.MetricsStale, x.Metrics.N, d2(x.FeedCompute), x.FeedGap.P50,
				x.FeedProblems, x.WindowCPU.WindowSeconds, x.ServeCores, x.PostgresCores, x.PostgresBackgroundCores, x.LoadAvg[0])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// writeCPU writes the CPU split of each drain and latency configuration's median run.
func (r *Report) writeCPU(w io.Writer) error {
	type row struct {
		name string
		cpu  CPUSplit
		per  int // tasks
	}
	var rows []row
	for _, set := range []struct {
		name string
		rs   []DrainResult
	}{{ExpNoop, r.E1}, {ExpSleep, r.E2}, {ExpRetry, retryDrains(r.E5)}} {
		for _, g := range groupDrains(set.rs) {
			mid := medianRun(g, func(d DrainResult) float64 { return d.Throughput })
			rows = append(rows, row{set.name + " " + mid.Layout.String(), mid.CPU, mid.Tasks})
		}
	}
	for _, l := range r.Latency {
		if l.Error == "" {
			rows = append(rows, row{fmt.Sprintf("latency r%d", l.Run), l.CPU, l.Tasks})
			break
		}
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nCPU seconds by process during the measured window (median run; shares of the machine's busy time)")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	classes := []string{cpuServe, cpuWorkers, cpuPGBench, cpuPGAutovac, cpuPGBackgr, cpuRedis, cpuHarness, cpuPGOther, cpuElsewhere}
	fmt.Fprintf(tw, "step\twindow s\t%s\tbusy/cores\tcpu ms/task\t\n", strings.Join(classes, "\t"))
	for _, rw := range rows {
		fmt.Fprintf(tw, "%s\t%.1f\t", rw.name, rw.cpu.WindowSeconds)
		var ours float64
		for _, c := range classes {
			s := rw.cpu.Seconds[c]
			if c != cpuElsewhere && c != cpuPGOther {
				ours += s
			}
			fmt.Fprintf(tw, "%.2f (%.0f%%)\t", s, 100*s/max(rw.cpu.MachineBusy, 1e-9))
		}
		util := rw.cpu.MachineBusy / max(rw.cpu.WindowSeconds*float64(max(rw.cpu.Cores, 1)), 1e-9)
		fmt.Fprintf(tw, "%.0f%%\t%.2f\t\n", 100*util, 1000*ours/float64(max(rw.per, 1)))
	}
	return tw.Flush()
}

func retryDrains(rs []RetryResult) []DrainResult {
	out := make([]DrainResult, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.DrainResult)
	}
	return out
}

// groupDrains groups successful drain results by layout, in first-seen order.
func groupDrains(rs []DrainResult) [][]DrainResult {
	var order []string
	by := map[string][]DrainResult{}
	for _, d := range rs {
		if d.Error != "" {
			continue
		}
		k := d.Layout.String()
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], d)
	}
	out := make([][]DrainResult, 0, len(order))
	for _, k := range order {
		out = append(out, by[k])
	}
	return out
}

func fieldOf(g []DrainResult, f func(DrainResult) float64) []float64 {
	out := make([]float64, len(g))
	for i, d := range g {
		out[i] = f(d)
	}
	return out
}

// medianRun is the run whose figure is the (lower) median.
func medianRun(g []DrainResult, f func(DrainResult) float64) DrainResult {
	s := slices.Clone(g)
	slices.SortFunc(s, func(a, b DrainResult) int {
		switch fa, fb := f(a), f(b); {
		case fa < fb:
			return -1
		case fa > fb:
			return 1
		}
		return 0
	})
	return s[(len(s)-1)/2]
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	return strings.Join(f[:min(n, len(f))], " ")
}

// settingsLine lists the PostgreSQL settings recorded, in reportedSettings'
// order: "autovacuum=on fsync=on ...".
func (m Machine) settingsLine() string {
	var parts []string
	for _, name := range reportedSettings {
		if v, ok := m.PostgresSettings[name]; ok {
			parts = append(parts, name+"="+v)
		}
	}
	if len(parts) == 0 {
		return "not recorded"
	}
	return strings.Join(parts, " ")
}
