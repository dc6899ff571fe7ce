package bench

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Experiment names, in the order Run runs them.
const (
	ExpNoop     = "e1"      // drain no-op tasks
	ExpSleep    = "e2"      // drain 50 ms sleeps
	ExpLatency  = "latency" // enqueue → worker receipt at a steady rate
	ExpEnqueue  = "enqueue" // one producer's enqueues, back to back
	ExpRetry    = "e5"      // every task fails once, then succeeds
	ExpRecovery = "e6"      // workers SIGKILLed while holding tasks
	ExpScale    = "scale"   // costs as queues and rows grow
	ExpFair     = "fair"    // fair queues: a backlog beside small groups, many groups, E1 with one group
)

// AllExperiments lists every experiment in the order Run runs them.
var AllExperiments = []string{ExpNoop, ExpSleep, ExpLatency, ExpEnqueue, ExpRetry, ExpRecovery, ExpScale, ExpFair}

// DefaultExperiments are the experiments run when none are named: all but scale,
// whose default sizes (10,000 queues, 10 million rows) take many minutes.
var DefaultExperiments = []string{ExpNoop, ExpSleep, ExpLatency, ExpEnqueue, ExpRetry, ExpRecovery}

// Local servers used when the configuration names none.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

// Layout is how a step deploys its workers: Procs reference worker processes, each
// running up to Concurrency tasks at once, and so polling for up to that many
// (max_tasks) at a time, plus the tasks each claims ahead (Prefetch).
type Layout struct {
	Procs       int
	Concurrency int
	// Prefetch is the worker's --prefetch: 0 leaves the worker's default (its concurrency), a
	// negative value turns prefetching off, a positive one sets it.
	Prefetch int
	// Protocol is the worker's --protocol: "" (the SDK's runtime), "plain" (each
	// slot polls one task and acks it alone) or "batched" (each process polls up
	// to Concurrency tasks and acks them in one batch): workers written from the
	// API reference, without the SDK's prefetch and acks on polls.
	Protocol string
}

// Workers is the number of tasks the layout runs at once.
func (l Layout) Workers() int { return l.Procs * l.Concurrency }

// String is the layout as ParseLayout reads it: "<procs>x<concurrency>", with
// "+<prefetch>" when the prefetch is not the worker's default.
func (l Layout) String() string {
	s := fmt.Sprintf("%dx%d", l.Procs, l.Concurrency)
	if l.Prefetch != 0 {
		s += fmt.Sprintf("+%d", max(l.Prefetch, 0))
	}
	if l.Protocol != "" {
		s += "/" + l.Protocol
	}
	return s
}

// slug is String fit for queue names, worker ids and file names: "16x1p0".
func (l Layout) slug() string {
	return strings.NewReplacer("+", "p", "/", "-").Replace(l.String())
}

// workerArgs are the reference worker's flags for the layout's prefetch and
// protocol.
func (l Layout) workerArgs() []string {
	var args []string
	if l.Prefetch != 0 {
		args = append(args, "--prefetch", strconv.Itoa(max(l.Prefetch, 0)))
	}
	if l.Protocol != "" {
		args = append(args, "--protocol", l.Protocol)
	}
	return args
}

// MarshalText writes the layout as String does, so JSON shows "16x1".
func (l Layout) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (l *Layout) UnmarshalText(b []byte) error {
	v, err := ParseLayout(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// ParseLayout reads "<procs>x<concurrency>[+<prefetch>][/<protocol>]", e.g.
// "16x1" (sixteen processes running one task each, with the worker's default
// prefetch), "1x16" (one process running sixteen), "16x1+0" (sixteen, none
// prefetching) or "16x1/plain" (sixteen plain protocol loops, see Layout).
func ParseLayout(s string) (Layout, error) {
	s = strings.TrimSpace(s)
	protocol := ""
	if base, proto, ok := strings.Cut(s, "/"); ok {
		if proto != "plain" && proto != "batched" {
			return Layout{}, fmt.Errorf("layout %q: the protocol after / must be plain or batched", s)
		}
		s, protocol = base, proto
	}
	prefetch := 0
	if base, pf, ok := strings.Cut(s, "+"); ok {
		n, err := strconv.Atoi(pf)
		if err != nil || n < 0 || n > 100 {
			return Layout{}, fmt.Errorf("layout %q: the prefetch after + must be an integer from 0 to 100", s)
		}
		s, prefetch = base, n
		if n == 0 {
			prefetch = -1
		}
	}
	p, c, ok := strings.Cut(s, "x")
	if !ok {
		return Layout{}, fmt.Errorf("layout %q: want <procs>x<concurrency>, e.g. 16x1", s)
	}
	procs, err1 := strconv.Atoi(p)
	conc, err2 := strconv.Atoi(c)
	if err := errors.Join(err1, err2); err != nil || procs < 1 || conc < 1 {
		return Layout{}, fmt.Errorf("layout %q: want two positive integers, e.g. 16x1", s)
	}
	if conc > 100 {
		return Layout{}, fmt.Errorf("layout %q: concurrency above 100 cannot be polled for at once", s)
	}
	if protocol != "" && prefetch != 0 {
		return Layout{}, fmt.Errorf("layout %q: a %s worker does not prefetch", s, protocol)
	}
	return Layout{Procs: procs, Concurrency: conc, Prefetch: prefetch, Protocol: protocol}, nil
}

// ParseLayouts reads a comma-separated list of layouts.
func ParseLayouts(s string) ([]Layout, error) {
	var out []Layout
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		l, err := ParseLayout(part)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("layouts %q: give at least one", s)
	}
	return out, nil
}

// The languages whose SDK a run can measure (Config.Language).
const (
	LanguageGo         = "go"
	LanguageTypeScript = "typescript"
	LanguagePython     = "python"
)

// Languages lists them.
var Languages = []string{LanguageGo, LanguageTypeScript, LanguagePython}

// DrainConfig sizes a drain experiment (E1, E2, E5): Tasks are enqueued while the
// queue is paused, then drained by each layout in turn.
type DrainConfig struct {
	// Tasks measured per step.
	Tasks int `json:"tasks"`
	// Warmup tasks run through the same server and workers before the measured
	// ones, and are excluded. Zero takes the default; negative means none.
	Warmup int `json:"warmup"`
	// Layouts to measure, in order.
	Layouts []Layout `json:"layouts"`
}

// LatencyConfig sizes the latency experiment.
type LatencyConfig struct {
	// Rate of enqueues per second, one task per request. Defaults to 100.
	Rate float64 `json:"rate"`
	// Duration of the measured enqueue stream. Defaults to 10s.
	Duration time.Duration `json:"duration_ns"`
	// Warmup is an excluded stream at the same rate before it. Defaults to 1s;
	// negative means none.
	Warmup time.Duration `json:"warmup_ns"`
	// Layout of the idle, long-polling workers. Defaults to 4x1.
	Layout Layout `json:"layout"`
}

// EnqueueConfig sizes the enqueue experiment.
type EnqueueConfig struct {
	// Tasks measured: one request each, the next sent when the answer arrived.
	// Defaults to 1000.
	Tasks int `json:"tasks"`
	// Warmup requests sent first and excluded (serve has just started, and its
	// connections are opened on first use). Defaults to 100; negative means none.
	Warmup int `json:"warmup"`
}

// RetryConfig sizes E5.
type RetryConfig struct {
	DrainConfig
	// BackoffBase is the queue's backoff_base_ms. Defaults to 10ms.
	BackoffBase time.Duration `json:"backoff_base_ns"`
}

// LeaseVariant is a set of lease settings E6 runs under. Zero durations leave the
// server's defaults (30s lease, 10s heartbeats, 15s watchdog interval).
type LeaseVariant struct {
	Name              string        `json:"name"`
	LeaseTimeout      time.Duration `json:"lease_timeout_ns,omitempty"`
	HeartbeatInterval time.Duration `json:"heartbeat_interval_ns,omitempty"`
	WatchdogInterval  time.Duration `json:"watchdog_interval_ns,omitempty"`
}

// DefaultLeaseVariants are E6's variants: the server's defaults, and short leases
// that keep the run short.
var DefaultLeaseVariants = []LeaseVariant{
	{Name: "default"},
	{Name: "short", LeaseTimeout: 2 * time.Second, HeartbeatInterval: 500 * time.Millisecond,
		WatchdogInterval: time.Second},
}

// RecoveryConfig sizes E6.
type RecoveryConfig struct {
	// Variants of lease settings, each a step of its own.
	Variants []LeaseVariant `json:"variants"`
	// Victims hold one task per slot when they are SIGKILLed. Defaults to 4x4.
	Victims Layout `json:"victims"`
	// Survivors are idle, long-polling workers started before the kill; they need
	// a slot for every task. Defaults to 4x8.
	Survivors Layout `json:"survivors"`
}

// ScaleConfig sizes the scale experiment: how idle CPU and enqueue → worker
// latency grow with the number of queues, and how the cost of stats, metrics and
// the dashboard's live feed grows with the rows of one queue.
type ScaleConfig struct {
	// Queues are the queue counts of the queues curve, each a step. Nil defaults
	// to 1, 1000, 10000; empty skips the curve.
	Queues []int `json:"queues"`
	// Rows are the pending-task counts of the rows curve, each a step. Nil
	// defaults to 100k, 1M, 10M; empty skips the curve.
	Rows []int `json:"rows"`
	// Settle is how long after serve is ready a step's first window starts, so
	// that serve's start-up work is not measured. Defaults to 3s.
	Settle time.Duration `json:"settle_ns"`
	// IdleWindow is the queues curve's idle CPU window. Defaults to 15s.
	IdleWindow time.Duration `json:"idle_window_ns"`
	// LatencySamples is how many enqueue → long-poll receipts each queues step
	// measures (after scaleWarmupSamples excluded). Defaults to 50.
	LatencySamples int `json:"latency_samples"`
	// Samples is how many stats requests, metrics scrapes and feed refreshes
	// each rows step measures. Defaults to 20.
	Samples int `json:"samples"`
	// ScrapeEvery is the pause between one /metrics scrape's answer and the next
	// scrape during the rows curve's CPU window. Defaults to 2.5s (longer than
	// serve's 2 s metrics cache, so that every scrape may compute afresh).
	ScrapeEvery time.Duration `json:"scrape_every_ns"`
}

// Config is what Run measures and against which servers. Zero fields take the
// defaults given in their comments.
type Config struct {
	// Binary is the taskforge binary exec'd for `serve` and `worker` processes.
	// Defaults to the running executable.
	Binary string `json:"-"`
	// DatabaseURL names a PostgreSQL server and a role that may CREATE DATABASE;
	// every step runs in a fresh database created there and dropped after.
	// Defaults to DefaultDatabaseURL.
	DatabaseURL string `json:"-"`
	// DatabaseTemplate, when set, names a database on that server that every step's
	// database copies, data and all (CREATE DATABASE ... TEMPLATE ... STRATEGY
	// FILE_COPY), instead of starting empty: say one whose history holds 10 million
	// finished tasks (internal/bench/history-template.sh builds it). It must carry
	// the binary's migrations, and nobody may be connected to it.
	DatabaseTemplate string `json:"database_template,omitempty"`
	// RedisURL names the Redis server; every step uses a fresh key prefix and
	// deletes its keys after. Defaults to DefaultRedisURL.
	RedisURL string `json:"-"`
	// Seed drives every random choice of the harness (E6's kill moments).
	// Defaults to 1.
	Seed uint64 `json:"seed"`
	// Runs repeats E1, E2, latency and enqueue; the report gives their medians. Defaults to 3.
	Runs int `json:"runs"`
	// CheckRuns repeats E5 and E6. Defaults to 1.
	CheckRuns int `json:"check_runs"`
	// Experiments to run, among AllExperiments. Defaults to DefaultExperiments.
	Experiments []string `json:"experiments"`

	E1      DrainConfig    `json:"e1"`
	E2      DrainConfig    `json:"e2"`
	SleepMs int            `json:"e2_sleep_ms"` // E2's task duration; defaults to 50
	Latency LatencyConfig  `json:"latency"`
	Enqueue EnqueueConfig  `json:"enqueue"`
	E5      RetryConfig    `json:"e5"`
	E6      RecoveryConfig `json:"e6"`
	Scale   ScaleConfig    `json:"scale"`
	Fair    FairConfig     `json:"fair"`

	// Language names the SDK whose worker runs the layouts without a protocol:
	// "go" (the reference worker, `taskforge worker`), "typescript" or
	// "python". Defaults to "go".
	Language string `json:"language,omitempty"`
	// WorkerCommand runs one worker of a Language other than Go (with its
	// arguments, e.g. node sdk/typescript/dist/bench/worker.js); the harness sets
	// TASKFORGE_URL, QUEUE, HANDLER (noop or sleep), CONCURRENCY, PREFETCH (when
	// the layout sets one) and WORKER_ID in its environment. Protocol layouts
	// (plain, batched) always run the reference worker.
	WorkerCommand []string `json:"worker_command,omitempty"`
	// WorkerEnv are settings (KEY=VALUE) every worker process gets on top of
	// the harness's (TASKFORGE_CPROFILE=FILE to profile a Python worker).
	WorkerEnv []string `json:"worker_env,omitempty"`

	// ServeEnv are settings (KEY=VALUE) every serve process gets on top of its
	// defaults, to measure one: GOMAXPROCS=1, GOGC=200, TASKFORGE_DISPATCH_INTERVAL=100ms.
	// A step's own settings (E6's lease variants) win over them; the ones the
	// harness uses to place each step (reservedServeEnv) are refused.
	ServeEnv []string `json:"serve_env,omitempty"`
	// ProfileDir, when set, makes E1's serve processes write a CPU profile of each
	// measured window there (e1-<layout>-r<run>.pprof).
	ProfileDir string `json:"profile_dir,omitempty"`
	// WorkDir holds the processes' logs. Defaults to a temporary directory that Run
	// removes unless KeepWorkDir is set or a step failed.
	WorkDir     string `json:"-"`
	KeepWorkDir bool   `json:"-"`
	// Progress receives a one-line progress display (carriage returns); nil
	// shows none.
	Progress io.Writer `json:"-"`
}

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	c.DatabaseURL = cmp.Or(c.DatabaseURL, DefaultDatabaseURL)
	c.RedisURL = cmp.Or(c.RedisURL, DefaultRedisURL)
	c.Language = cmp.Or(c.Language, LanguageGo)
	c.Seed = cmp.Or(c.Seed, 1)
	c.Runs = cmp.Or(c.Runs, 3)
	c.CheckRuns = cmp.Or(c.CheckRuns, 1)
	if len(c.Experiments) == 0 {
		c.Experiments = slices.Clone(DefaultExperiments)
	}
	c.E1.Tasks = cmp.Or(c.E1.Tasks, 5000)
	c.E1.Warmup = cmp.Or(c.E1.Warmup, 500)
	if len(c.E1.Layouts) == 0 {
		c.E1.Layouts = []Layout{{Procs: 1, Concurrency: 1, Prefetch: 0}, {Procs: 4, Concurrency: 1, Prefetch: 0}, {Procs: 8, Concurrency: 1, Prefetch: 0}, {Procs: 16, Concurrency: 1, Prefetch: 0}, {Procs: 1, Concurrency: 16, Prefetch: 0}, {Procs: 4, Concurrency: 16, Prefetch: 0}}
	}
	c.E2.Tasks = cmp.Or(c.E2.Tasks, 1000)
	c.E2.Warmup = cmp.Or(c.E2.Warmup, 50)
	if len(c.E2.Layouts) == 0 {
		c.E2.Layouts = []Layout{{Procs: 1, Concurrency: 1, Prefetch: 0}, {Procs: 4, Concurrency: 1, Prefetch: 0}, {Procs: 8, Concurrency: 1, Prefetch: 0}, {Procs: 16, Concurrency: 1, Prefetch: 0}, {Procs: 16, Concurrency: 1, Prefetch: -1}}
	}
	c.SleepMs = cmp.Or(c.SleepMs, 50)
	c.Latency.Rate = cmp.Or(c.Latency.Rate, 100)
	c.Latency.Duration = cmp.Or(c.Latency.Duration, 10*time.Second)
	c.Latency.Warmup = cmp.Or(c.Latency.Warmup, time.Second)
	c.Latency.Layout = cmp.Or(c.Latency.Layout, Layout{Procs: 4, Concurrency: 1, Prefetch: 0})
	c.Enqueue.Tasks = cmp.Or(c.Enqueue.Tasks, 1000)
	c.Enqueue.Warmup = cmp.Or(c.Enqueue.Warmup, 100)
	c.E5.Tasks = cmp.Or(c.E5.Tasks, 1000)
	c.E5.Warmup = cmp.Or(c.E5.Warmup, 50)
	if len(c.E5.Layouts) == 0 {
		c.E5.Layouts = []Layout{{Procs: 8, Concurrency: 1, Prefetch: 0}}
	}
	c.E5.BackoffBase = cmp.Or(c.E5.BackoffBase, 10*time.Millisecond)
	if len(c.E6.Variants) == 0 {
		c.E6.Variants = slices.Clone(DefaultLeaseVariants)
	}
	c.E6.Victims = cmp.Or(c.E6.Victims, Layout{Procs: 4, Concurrency: 4, Prefetch: 0})
	c.E6.Survivors = cmp.Or(c.E6.Survivors, Layout{Procs: 4, Concurrency: 8, Prefetch: 0})
	if c.Scale.Queues == nil { // empty but not nil: skip the curve
		c.Scale.Queues = []int{1, 1000, 10000}
	}
	if c.Scale.Rows == nil {
		c.Scale.Rows = []int{100_000, 1_000_000, 10_000_000}
	}
	c.Scale.Settle = cmp.Or(c.Scale.Settle, 3*time.Second)
	c.Fair.defaults()
	c.Scale.IdleWindow = cmp.Or(c.Scale.IdleWindow, 15*time.Second)
	c.Scale.LatencySamples = cmp.Or(c.Scale.LatencySamples, 50)
	c.Scale.Samples = cmp.Or(c.Scale.Samples, 20)
	c.Scale.ScrapeEvery = cmp.Or(c.Scale.ScrapeEvery, 2500*time.Millisecond)
	return c
}

// Validate reports settings Run cannot use.
func (c Config) Validate() error {
	var errs []error
	for _, e := range c.Experiments {
		if !slices.Contains(AllExperiments, e) {
			errs = append(errs, fmt.Errorf("unknown experiment %q (want some of %s)", e, strings.Join(AllExperiments, ", ")))
		}
	}
	if c.Runs < 1 || c.CheckRuns < 1 {
		errs = append(errs, errors.New("runs must be at least 1"))
	}
	for name, d := range map[string]DrainConfig{"e1": c.E1, "e2": c.E2, "e5": c.E5.DrainConfig} {
		if d.Tasks < 1 {
			errs = append(errs, fmt.Errorf("%s: tasks must be at least 1", name))
		}
	}
	if c.Enqueue.Tasks < 1 {
		errs = append(errs, errors.New("enqueue: tasks must be at least 1"))
	}
	if c.SleepMs < 1 {
		errs = append(errs, errors.New("e2: sleep must be at least 1 ms"))
	}
	if c.Latency.Rate <= 0 || c.Latency.Duration <= 0 {
		errs = append(errs, errors.New("latency: rate and duration must be positive"))
	}
	if c.Latency.Rate*c.Latency.Duration.Seconds() < 1 {
		errs = append(errs, errors.New("latency: rate × duration must give at least one task"))
	}
	if c.E6.Survivors.Workers() < c.E6.Victims.Workers() {
		errs = append(errs, fmt.Errorf("e6: survivors (%s) need a slot for each of the victims' %d tasks",
			c.E6.Survivors, c.E6.Victims.Workers()))
	}
	for _, v := range c.E6.Variants {
		if v.Name == "" {
			errs = append(errs, errors.New("e6: every lease variant needs a name"))
		}
	}
	for _, n := range c.Scale.Queues {
		if n < 1 || n > maxScaleQueues {
			errs = append(errs, fmt.Errorf("scale: queue counts must be from 1 to %d, got %d", maxScaleQueues, n))
		}
	}
	for _, n := range c.Scale.Rows {
		if n < 1 {
			errs = append(errs, fmt.Errorf("scale: row counts must be at least 1, got %d", n))
		}
	}
	if c.Scale.Settle < 0 || c.Scale.IdleWindow <= 0 || c.Scale.ScrapeEvery < 0 {
		errs = append(errs, errors.New("scale: the idle window must be positive, settle and scrape pause not negative"))
	}
	errs = append(errs, checkServeEnv(c.ServeEnv)...)
	if !slices.Contains(Languages, c.Language) {
		errs = append(errs, fmt.Errorf("unknown language %q (want one of %s)", c.Language, strings.Join(Languages, ", ")))
	}
	if (c.Language == LanguageGo) != (len(c.WorkerCommand) == 0) {
		errs = append(errs, fmt.Errorf("language %s: a worker command is needed for every language but go, and only for them", c.Language))
	}
	if slices.Contains(c.Experiments, ExpScale) && len(c.Scale.Queues)+len(c.Scale.Rows) == 0 {
		errs = append(errs, errors.New("scale: both curves are skipped"))
	}
	if f := c.Fair; f.Backlog < 1 || f.SmallGroups < 1 || f.SmallTasks < 1 || f.Spread < 1 || f.SpreadDepth < 1 || f.E1Tasks < 1 {
		errs = append(errs, errors.New("fair: sizes must be at least 1"))
	}
	for _, part := range c.Fair.Parts {
		if !slices.Contains(FairParts, part) {
			errs = append(errs, fmt.Errorf("fair: unknown part %q (want %s)", part, strings.Join(FairParts, ", ")))
		}
	}
	if c.Scale.LatencySamples < 1 || c.Scale.Samples < 1 {
		errs = append(errs, errors.New("scale: sample counts must be at least 1"))
	}
	return errors.Join(errs...)
}

// runsOf is how many times experiment exp repeats.
func (c Config) runsOf(exp string) int {
	if exp == ExpRetry || exp == ExpRecovery {
		return c.CheckRuns
	}
	if exp == ExpScale { // each point of its curves takes minutes at the large sizes
		return 1
	}
	return c.Runs
}

// ParseCounts reads a comma-separated list of positive counts, each an integer
// with an optional suffix k (thousand) or M (million): "1,1000,10k" or
// "100k,1M,10M". "none" is the empty (not nil) list.
func ParseCounts(s string) ([]int, error) {
	if strings.TrimSpace(s) == "none" {
		return []int{}, nil
	}
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		mult, digits := 1, part
		switch {
		case strings.HasSuffix(part, "k"), strings.HasSuffix(part, "K"):
			mult, digits = 1000, part[:len(part)-1]
		case strings.HasSuffix(part, "M"), strings.HasSuffix(part, "m"):
			mult, digits = 1_000_000, part[:len(part)-1]
		}
		n, err := strconv.Atoi(digits)
		if err != nil || n < 1 || n > math.MaxInt32/mult {
			return nil, fmt.Errorf("count %q: want a positive integer, optionally with k or M, e.g. 100k", part)
		}
		out = append(out, n*mult)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("counts %q: give at least one", s)
	}
	return out, nil
}

// reservedServeEnv are the settings by which the harness points each serve at its
// step's database, key prefix and port; Config.ServeEnv may not set them.
var reservedServeEnv = []string{"DATABASE_URL", "REDIS_URL", "TASKFORGE_REDIS_PREFIX", "TASKFORGE_LISTEN"}

// checkServeEnv returns an error for each entry of env that is not KEY=VALUE or
// sets a reserved key.
func checkServeEnv(env []string) []error {
	var errs []error
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "" || strings.ContainsAny(k, " \t"):
			errs = append(errs, fmt.Errorf("serve env %q: want KEY=VALUE", kv))
		case slices.Contains(reservedServeEnv, k):
			errs = append(errs, fmt.Errorf("serve env %q: the harness sets %s for each step", kv, k))
		}
	}
	return errs
}
