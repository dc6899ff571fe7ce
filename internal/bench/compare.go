package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// PeerReport is what the peers program (internal/bench/peers, a module of its
// own so that TaskForge never depends on River or Asynq) writes with --json.
type PeerReport struct {
	StartedAt time.Time    `json:"started_at"`
	Machine   string       `json:"machine"`
	Results   []PeerResult `json:"results"`
}

// PeerResult is one figure of one peer system in a PeerReport.
type PeerResult struct {
	System   string  `json:"system"`            // "river" or "asynq"
	Workload string  `json:"workload"`          // e1, e1-preload, e2, latency, enqueue
	Workers  int     `json:"workers,omitempty"` // handlers running at once
	Tasks    int     `json:"tasks"`
	Runs     int     `json:"runs"`
	PerSec   float64 `json:"per_sec,omitempty"` // tasks/s
	P50Ms    float64 `json:"p50_ms,omitempty"`
	P95Ms    float64 `json:"p95_ms,omitempty"`
	P99Ms    float64 `json:"p99_ms,omitempty"`
}

// CompareConfig is what Compare runs. The two sides run the same workloads at the
// same sizes: E1 (no-op tasks, enqueued first, then drained) at each worker
// count, the E1 preload, E2 (50 ms tasks, 16 workers), latency (enqueue → worker
// at 100 tasks/s, 16 idle workers) and one producer's enqueues back to back.
// TaskForge's workers are the plain and batched protocol loops (Layout.Protocol).
type CompareConfig struct {
	// Bench holds the servers, the taskforge binary and the work directory of
	// TaskForge's side; Compare sets its experiments, layouts and sizes.
	Bench Config
	// Peers is the path of the built peers program.
	Peers string
	// Rounds of both sides; the ratios are medians over the rounds. TaskForge
	// runs first in odd rounds, the peers in even ones. Defaults to 3.
	Rounds int
	// Workers are E1's worker counts. Defaults to 1, 16, 100.
	Workers []int
	// Batch is how many tasks a batched TaskForge worker polls for (and acks) at
	// once: the layout <workers>x<Batch>/batched. Defaults to 50.
	Batch int
	// Tasks per E1 drain and preload. Defaults to 10,000.
	Tasks int
	// SleepTasks per E2 drain. Defaults to 1,000.
	SleepTasks int
	// LatencyTasks of the latency stream, sent at 100 a second. Defaults to 1,000.
	LatencyTasks int
	// EnqueueTasks timed back to back. Defaults to 1,000.
	EnqueueTasks int
	// Languages are the languages whose SDK is compared with that language's
	// peers, among Languages. Defaults to go alone.
	Languages []string
	// LanguagePeers are the peers programs of the languages but Go (typescript:
	// graphile-worker and BullMQ; python: Celery and RQ), each a command that
	// takes the Go peers program's flags and writes the same JSON report.
	LanguagePeers map[string][]string
	// WorkerCommands run one SDK worker of each language but Go
	// (Config.WorkerCommand).
	WorkerCommands map[string][]string
	// Progress receives both sides' progress lines; nil shows none.
	Progress io.Writer
}

// sdkLayout is a language's SDK worker at w concurrent handlers: one process
// running w tasks at once, with the SDK's default prefetch, as the peers run w
// handlers in one process.
func sdkLayout(w int) Layout { return Layout{Procs: 1, Concurrency: w} }

// latencyRate is the latency workloads' enqueue rate, as the peers program has it.
const latencyRate = 100

// e2Workers and e2SleepMs are the peers program's E2: 16 workers, 50 ms tasks.
const (
	e2Workers = 16
	e2SleepMs = 50
)

func (c CompareConfig) withDefaults() CompareConfig {
	c.Rounds = cmp.Or(c.Rounds, 3)
	if len(c.Workers) == 0 {
		c.Workers = []int{1, 16, 100}
	}
	c.Batch = cmp.Or(c.Batch, 50)
	c.Tasks = cmp.Or(c.Tasks, 10_000)
	c.SleepTasks = cmp.Or(c.SleepTasks, 1000)
	c.LatencyTasks = cmp.Or(c.LatencyTasks, 1000)
	c.EnqueueTasks = cmp.Or(c.EnqueueTasks, 1000)
	if len(c.Languages) == 0 {
		c.Languages = []string{LanguageGo}
	}
	return c
}

// plainLayout and batchedLayout are TaskForge's E1 layouts at w workers.
func plainLayout(w int) Layout { return Layout{Procs: w, Concurrency: 1, Protocol: "plain"} }
func (c CompareConfig) batchedLayout(w int) Layout {
	return Layout{Procs: w, Concurrency: c.Batch, Protocol: "batched"}
}

// benchConfig is TaskForge's side of one round for language lang: its SDK's
// worker at each worker count, E2 and latency; Go's side adds the bare
// protocol's loops (plain and batched) and one producer's enqueues.
func (c CompareConfig) benchConfig(lang string) Config {
	b := c.Bench
	b.Runs = 1
	b.Language = lang
	b.WorkerCommand = c.WorkerCommands[lang]
	b.Experiments = []string{ExpNoop, ExpSleep, ExpLatency}
	b.E1.Tasks = c.Tasks
	b.E1.Layouts = nil
	b.E2.Layouts = nil
	if lang == LanguageGo {
		b.Experiments = append(b.Experiments, ExpEnqueue)
		for _, w := range c.Workers {
			b.E1.Layouts = append(b.E1.Layouts, plainLayout(w), c.batchedLayout(w))
		}
		b.E2.Layouts = []Layout{plainLayout(e2Workers)}
	}
	for _, w := range c.Workers {
		b.E1.Layouts = append(b.E1.Layouts, sdkLayout(w))
	}
	b.E2.Tasks = c.SleepTasks
	b.E2.Layouts = append(b.E2.Layouts, sdkLayout(e2Workers))
	b.SleepMs = e2SleepMs
	b.Latency.Layout = sdkLayout(16)
	b.Latency.Rate = latencyRate
	b.Latency.Duration = time.Duration(c.LatencyTasks) * time.Second / latencyRate
	b.Enqueue.Tasks = c.EnqueueTasks
	b.Progress = c.Progress
	return b
}

// peerCommand is the peers program of lang and its flags for one round, writing
// to jsonPath.
func (c CompareConfig) peerCommand(lang, jsonPath string) ([]string, error) {
	args, err := c.peerArgs(jsonPath)
	if err != nil {
		return nil, err
	}
	if lang == LanguageGo {
		return append([]string{c.Peers}, args...), nil
	}
	prog := c.LanguagePeers[lang]
	if len(prog) == 0 {
		return nil, fmt.Errorf("no peers program for %s", lang)
	}
	return slices.Concat(prog, args, []string{"--workloads", "e1,e1-preload,e2,latency"}), nil
}

// peerArgs are the peers programs' flags for one round, writing to jsonPath.
func (c CompareConfig) peerArgs(jsonPath string) ([]string, error) {
	b := c.Bench.WithDefaults()
	u, err := url.Parse(b.RedisURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("redis URL %q: want redis://host:port", b.RedisURL)
	}
	workers := make([]string, len(c.Workers))
	for i, w := range c.Workers {
		workers[i] = strconv.Itoa(w)
	}
	return []string{
		"--database-url", b.DatabaseURL, "--redis-addr", u.Host, "--runs", "1",
		"--workers", strings.Join(workers, ","), "--tasks", strconv.Itoa(c.Tasks),
		"--sleep-tasks", strconv.Itoa(c.SleepTasks), "--latency-tasks", strconv.Itoa(c.LatencyTasks),
		"--enqueue-tasks", strconv.Itoa(c.EnqueueTasks), "--json", jsonPath,
	}, nil
}

// Round is one round of a comparison: both sides' reports, and which ran first.
// TaskForge and Peers are Go's (and the bare protocol's); Languages holds the
// other languages' pairs.
type Round struct {
	TaskForgeFirst bool            `json:"taskforge_first"`
	TaskForge      *Report         `json:"taskforge"`
	Peers          *PeerReport     `json:"peers"`
	Languages      []LanguageRound `json:"languages,omitempty"`
}

// LanguageRound is one language's pair of reports in a round: its SDK on
// TaskForge, and its peers.
type LanguageRound struct {
	Language  string      `json:"language"`
	TaskForge *Report     `json:"taskforge"`
	Peers     *PeerReport `json:"peers"`
}

// pair returns lang's reports in the round (nil when it did not run).
func (rd Round) pair(lang string) (*Report, *PeerReport) {
	if lang == LanguageGo || lang == "" {
		return rd.TaskForge, rd.Peers
	}
	for _, l := range rd.Languages {
		if l.Language == lang {
			return l.TaskForge, l.Peers
		}
	}
	return nil, nil
}

// Comparison is what Compare measured: the rounds, and each figure as ratios.
type Comparison struct {
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Machine    Machine   `json:"machine"` // as TaskForge's first round described it
	// ServeEnv are the settings TaskForge's serve processes ran with beyond their
	// defaults (Config.ServeEnv).
	ServeEnv []string `json:"serve_env,omitempty"`
	Rounds   []Round  `json:"rounds"`
	Ratios   []Ratio  `json:"ratios"`
}

// Ratio is one figure of both sides, round by round: TaskForge's against the best
// peer's (or one named peer's) measured in the same round.
type Ratio struct {
	// Language is the SDK's language ("go" also for the bare protocol).
	Language string `json:"language"`
	Figure   string `json:"figure"` // "e1 plain, 16 workers"
	Unit     string `json:"unit"`   // "tasks/s", "ms", "% of ideal"
	// LowerIsBetter is set for times: the best peer is then the fastest one.
	LowerIsBetter bool `json:"lower_is_better"`
	// Against is "best" or the one peer the target names ("river").
	Against   string    `json:"against"`
	TaskForge []float64 `json:"taskforge"`  // per round
	Peer      []float64 `json:"peer"`       // per round: the best (or named) peer's
	PeerNames []string  `json:"peer_names"` // per round: which peer that was
	Ratios    []float64 `json:"ratios"`     // per round: TaskForge / Peer
	Median    float64   `json:"median"`     // of Ratios
	// Target is the goal in words ("≥ 1.0× river"); empty when the figure has
	// none. Met is whether the median reaches it.
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
}

// figure says how to read one Ratio out of a round, and its target.
type figure struct {
	language      string
	name, unit    string
	lowerIsBetter bool
	against       string // "" for the best peer
	taskforge     func(*Report) (float64, bool)
	peer          func(PeerResult) (float64, bool)
	// ratioTarget, when set, is the goal for the median ratio; valueTarget,
	// when set, is a goal for TaskForge's median value instead.
	ratioTarget, valueTarget float64
}

// figures are the compared figures and their targets, language by language: for
// Go the bare protocol first (plain E1 against River at 1 worker and the best
// peer above, untargeted: its floor is two commits in series per task; batched
// E1 at 16 and 100 workers level with the best; the preload at 0.8 of it; E2
// plain at 95 % of ideal; latency p50 and p95 within 1.3× and 1.5×; one
// enqueue's round trip within River's), then each language's SDK (sdkFigures).
func (c CompareConfig) figures() []figure {
	var fs []figure
	for _, lang := range c.Languages {
		if lang == LanguageGo {
			fs = append(fs, c.protocolFigures()...)
		}
		fs = append(fs, c.sdkFigures(lang)...)
	}
	return fs
}

// e1Of reads the throughput of E1's layout l out of a report.
func e1Of(l Layout) func(*Report) (float64, bool) {
	return func(r *Report) (float64, bool) {
		i := slices.IndexFunc(r.E1, func(d DrainResult) bool { return d.Error == "" && d.Layout == l })
		if i < 0 {
			return 0, false
		}
		return r.E1[i].Throughput, true
	}
}

// e2Of reads the efficiency (%) of E2's layout l out of a report.
func e2Of(l Layout) func(*Report) (float64, bool) {
	return func(r *Report) (float64, bool) {
		i := slices.IndexFunc(r.E2, func(d DrainResult) bool { return d.Error == "" && d.Layout == l })
		if i < 0 {
			return 0, false
		}
		return 100 * r.E2[i].Efficiency, true
	}
}

// sdkFigures are lang's SDK against the best peer of lang (DESIGN §14's
// targets): E1 at each worker count (≥ 1.0× at 16 and 100), E2 at 16 (≥ 95 %
// of ideal); for the languages but Go also the preload (≥ 0.8×) and latency
// (p50 ≤ 1.3×, p95 ≤ 1.5×), which Go's figures give already.
func (c CompareConfig) sdkFigures(lang string) []figure {
	var fs []figure
	for _, w := range c.Workers {
		f := figure{language: lang, name: fmt.Sprintf("%s SDK e1, %d %s", lang, w, plural(w, "handler")),
			unit: "tasks/s", taskforge: e1Of(sdkLayout(w)), peer: peerE1(w)}
		if w == 16 || w == 100 {
			f.ratioTarget = 1.0
		}
		fs = append(fs, f)
	}
	ideal := float64(e2Workers) * 1000 / e2SleepMs
	fs = append(fs, figure{language: lang, name: fmt.Sprintf("%s SDK e2, %d handlers", lang, e2Workers), unit: "% of ideal",
		valueTarget: 95, taskforge: e2Of(sdkLayout(e2Workers)),
		peer: func(p PeerResult) (float64, bool) { return 100 * p.PerSec / ideal, p.Workload == "e2" }})
	if lang != LanguageGo {
		fs = append(fs, preloadFigure(lang, lang+" e1 preload, 1 client"),
			latencyFigure(lang, lang+" SDK enqueue → worker p50, 100/s", 1.3, func(d Dist) float64 { return d.P50 }, func(p PeerResult) float64 { return p.P50Ms }),
			latencyFigure(lang, lang+" SDK enqueue → worker p95, 100/s", 1.5, func(d Dist) float64 { return d.P95 }, func(p PeerResult) float64 { return p.P95Ms }))
	}
	return fs
}

// peerE1 reads a peer's E1 at w workers.
func peerE1(w int) func(PeerResult) (float64, bool) {
	return func(p PeerResult) (float64, bool) { return p.PerSec, p.Workload == "e1" && p.Workers == w }
}

// preloadFigure is the preload (≥ 0.8× the best peer's): the median of a
// report's E1 preloads.
func preloadFigure(lang, name string) figure {
	return figure{language: lang, name: name, unit: "tasks/s", ratioTarget: 0.8,
		taskforge: func(r *Report) (float64, bool) {
			var rates []float64
			for _, d := range r.E1 {
				if d.Error == "" && d.PreloadRate > 0 {
					rates = append(rates, d.PreloadRate)
				}
			}
			return median(rates), len(rates) > 0
		},
		peer: func(p PeerResult) (float64, bool) { return p.PerSec, p.Workload == "e1-preload" }}
}

// latencyFigure is one percentile of enqueue → worker at 100/s, within target×
// the best peer's.
func latencyFigure(lang, name string, target float64, of func(Dist) float64, peer func(PeerResult) float64) figure {
	return figure{language: lang, name: name, unit: "ms", lowerIsBetter: true, ratioTarget: target,
		taskforge: func(r *Report) (float64, bool) {
			i := slices.IndexFunc(r.Latency, func(l LatencyResult) bool { return l.Error == "" })
			if i < 0 {
				return 0, false
			}
			return of(r.Latency[i].Receipt), true
		},
		peer: func(p PeerResult) (float64, bool) { return peer(p), p.Workload == "latency" }}
}

// protocolFigures are Go's round's figures of the bare protocol (plain and
// batched loops), its preload, latency (the Go SDK's) and one enqueue's round
// trip.
func (c CompareConfig) protocolFigures() []figure {
	var fs []figure
	e1 := e1Of
	for _, w := range c.Workers {
		plain := figure{language: LanguageGo, name: fmt.Sprintf("e1 plain, %d %s", w, plural(w, "worker")), unit: "tasks/s",
			taskforge: e1(plainLayout(w)), peer: peerE1(w)}
		if w == 1 {
			plain.against = "river"
		}
		batched := figure{language: LanguageGo, name: fmt.Sprintf("e1 batched (%d per poll), %d %s", c.Batch, w, plural(w, "worker")),
			unit: "tasks/s", taskforge: e1(c.batchedLayout(w)), peer: peerE1(w)}
		if w == 16 || w == 100 {
			batched.ratioTarget = 1.0
		}
		fs = append(fs, plain, batched)
	}
	ideal := float64(e2Workers) * 1000 / e2SleepMs
	fs = append(fs, preloadFigure(LanguageGo, "e1 preload, 1 client"),
		figure{language: LanguageGo, name: fmt.Sprintf("e2 plain, %d workers", e2Workers), unit: "% of ideal", valueTarget: 95,
			taskforge: e2Of(plainLayout(e2Workers)),
			peer:      func(p PeerResult) (float64, bool) { return 100 * p.PerSec / ideal, p.Workload == "e2" }},
		latencyFigure(LanguageGo, "enqueue → worker p50, 100/s", 1.3, func(d Dist) float64 { return d.P50 }, func(p PeerResult) float64 { return p.P50Ms }),
		latencyFigure(LanguageGo, "enqueue → worker p95, 100/s", 1.5, func(d Dist) float64 { return d.P95 }, func(p PeerResult) float64 { return p.P95Ms }),
		figure{language: LanguageGo, name: "one enqueue's round trip p50", unit: "ms", lowerIsBetter: true, against: "river", ratioTarget: 1.0,
			taskforge: func(r *Report) (float64, bool) {
				i := slices.IndexFunc(r.Enqueue, func(e EnqueueResult) bool { return e.Error == "" })
				if i < 0 {
					return 0, false
				}
				return r.Enqueue[i].RTT.P50, true
			},
			peer: func(p PeerResult) (float64, bool) { return p.P50Ms, p.Workload == "enqueue" }})
	return fs
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// ratios reads every figure out of the rounds. A figure missing from a round on
// either side (a failed step, a peer not run) leaves that round out of its ratio.
func ratios(fs []figure, rounds []Round) []Ratio {
	out := make([]Ratio, 0, len(fs))
	for _, f := range fs {
		r := Ratio{Language: cmp.Or(f.language, LanguageGo), Figure: f.name, Unit: f.unit, LowerIsBetter: f.lowerIsBetter,
			Against: cmp.Or(f.against, "best")}
		for _, rd := range rounds {
			tfRep, peerRep := rd.pair(f.language)
			if tfRep == nil || peerRep == nil {
				continue
			}
			tf, ok := f.taskforge(tfRep)
			if !ok {
				continue
			}
			var best float64
			name := ""
			for _, p := range peerRep.Results {
				v, ok := f.peer(p)
				if !ok || v <= 0 || (f.against != "" && p.System != f.against) {
					continue
				}
				if name == "" || (f.lowerIsBetter && v < best) || (!f.lowerIsBetter && v > best) {
					best, name = v, p.System
				}
			}
			if name == "" {
				continue
			}
			r.TaskForge = append(r.TaskForge, tf)
			r.Peer = append(r.Peer, best)
			r.PeerNames = append(r.PeerNames, name)
			r.Ratios = append(r.Ratios, tf/best)
		}
		if len(r.Ratios) > 0 {
			r.Median = median(r.Ratios)
		}
		sign := "≥"
		if f.lowerIsBetter {
			sign = "≤"
		}
		switch {
		case f.ratioTarget > 0:
			r.Target = fmt.Sprintf("%s %.1f× %s", sign, f.ratioTarget, r.Against)
			if len(r.Ratios) > 0 {
				r.Met = reaches(r.Median, f.ratioTarget, f.lowerIsBetter)
			}
		case f.valueTarget > 0:
			r.Target = fmt.Sprintf("%s %g %s", sign, f.valueTarget, f.unit)
			if len(r.TaskForge) > 0 {
				r.Met = reaches(median(r.TaskForge), f.valueTarget, f.lowerIsBetter)
			}
		}
		out = append(out, r)
	}
	return out
}

// reaches says whether v meets target: at most it when lower is better, at least
// it otherwise.
func reaches(v, target float64, lowerIsBetter bool) *bool {
	met := v >= target
	if lowerIsBetter {
		met = v <= target
	}
	return &met
}

// Validate reports settings Compare cannot use (zero fields take their defaults).
func (c CompareConfig) Validate() error {
	c = c.withDefaults()
	if c.Peers == "" {
		return errors.New("the peers program is not given (build internal/bench/peers)")
	}
	if c.Rounds < 1 || c.Batch < 1 || min(c.Tasks, c.SleepTasks, c.LatencyTasks, c.EnqueueTasks) < 1 ||
		slices.Min(c.Workers) < 1 {
		return errors.New("rounds, batch, worker counts and task counts must be at least 1")
	}
	var errs []error
	for _, lang := range c.Languages {
		if !slices.Contains(Languages, lang) {
			errs = append(errs, fmt.Errorf("unknown language %q (want some of %s)", lang, strings.Join(Languages, ", ")))
			continue
		}
		if _, err := c.peerCommand(lang, ""); err != nil {
			errs = append(errs, err)
		}
		if err := c.benchConfig(lang).WithDefaults().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Compare runs TaskForge's workloads (through Run) and the peers program's, round
// after round on the same servers, and returns both sides' figures with their
// ratios. A failed round on either side ends the comparison with an error, and
// the rounds measured until then.
func Compare(ctx context.Context, cc CompareConfig) (*Comparison, error) {
	if err := cc.Validate(); err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	cc = cc.withDefaults()
	dir, err := os.MkdirTemp("", "taskforge-compare-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cmpn := &Comparison{StartedAt: time.Now().UTC(), ServeEnv: cc.Bench.ServeEnv}
	finish := func(err error) (*Comparison, error) {
		cmpn.FinishedAt = time.Now().UTC()
		cmpn.Ratios = ratios(cc.figures(), cmpn.Rounds)
		return cmpn, err
	}
	for i := 1; i <= cc.Rounds; i++ {
		rd := Round{TaskForgeFirst: i%2 == 1}
		var err error
		for _, lang := range cc.Languages {
			var tf *Report
			var peers *PeerReport
			tf, peers, err = cc.runLanguage(ctx, lang, i, rd.TaskForgeFirst, filepath.Join(dir, fmt.Sprintf("peers-%s-%d.json", lang, i)))
			if tf != nil && cmpn.Machine.Hostname == "" {
				cmpn.Machine = tf.Machine
			}
			if lang == LanguageGo {
				rd.TaskForge, rd.Peers = tf, peers
			} else {
				rd.Languages = append(rd.Languages, LanguageRound{Language: lang, TaskForge: tf, Peers: peers})
			}
			if err != nil {
				break
			}
		}
		cmpn.Rounds = append(cmpn.Rounds, rd)
		if err != nil {
			return finish(err)
		}
	}
	return finish(nil)
}

// runLanguage runs round i of one language: its SDK on TaskForge and its peers,
// TaskForge first when taskForgeFirst.
func (cc CompareConfig) runLanguage(ctx context.Context, lang string, i int, taskForgeFirst bool, jsonPath string) (
	tf *Report, peers *PeerReport, _ error) {
	runTaskForge := func() error {
		rep, err := Run(ctx, cc.benchConfig(lang))
		tf = rep
		if err == nil && len(rep.Problems) > 0 {
			err = fmt.Errorf("%d check(s) failed: %s", len(rep.Problems), strings.Join(rep.Problems, "; "))
		}
		if err != nil {
			return fmt.Errorf("round %d, TaskForge (%s): %w", i, lang, err)
		}
		return nil
	}
	runPeers := func() error {
		rep, err := cc.runPeers(ctx, lang, jsonPath)
		peers = rep
		if err != nil {
			return fmt.Errorf("round %d, %s peers: %w", i, lang, err)
		}
		return nil
	}
	first, second := runTaskForge, runPeers
	if !taskForgeFirst {
		first, second = runPeers, runTaskForge
	}
	err := first()
	if err == nil {
		err = second()
	}
	return tf, peers, err
}

// peersCleanup bounds how long an interrupted peers program may take to clean up.
const peersCleanup = 30 * time.Second

// runPeers runs the peers program once and reads the report it writes to jsonPath.
func (cc CompareConfig) runPeers(ctx context.Context, lang, jsonPath string) (*PeerReport, error) {
	argv, err := cc.peerCommand(lang, jsonPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// Interrupted, it drops River's database and deletes Asynq's keys before it
	// exits (the default, SIGKILL, would leave them).
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = peersCleanup
	var stderr bytes.Buffer
	cmd.Stdout = io.Discard // its own table: Compare prints the ratios
	cmd.Stderr = &stderr
	if cc.Progress != nil {
		cmd.Stderr = io.MultiWriter(&stderr, cc.Progress)
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w; it wrote:\n%s", argv[0], err, lastLines(stderr.String(), 15))
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return nil, fmt.Errorf("read the peers' report: %w", err)
	}
	var rep PeerReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("read the peers' report: %w", err)
	}
	return &rep, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// WriteJSON writes the comparison as indented JSON.
func (c *Comparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}

// WriteTable writes the ratios as a plain-text table: per figure, the medians of
// both sides, the median ratio with its range over the rounds, and the target.
func (c *Comparison) WriteTable(w io.Writer) error {
	m := c.Machine
	fmt.Fprintf(w, "TaskForge's SDKs against the best queues of their language, %d %s (TaskForge first in odd rounds); %s, %d cores, %s; %s; Redis %s\n",
		len(c.Rounds), plural(len(c.Rounds), "round"), m.Hostname, m.Cores, m.GoVersion, firstWords(m.Postgres, 2), m.Redis)
	fmt.Fprintln(w, "peers: go River, Asynq; typescript graphile-worker, BullMQ; python Celery, RQ. The bare protocol "+
		"(e1 plain: one poll, then one ack per task) has a floor of two commits in series per task: reported, not targeted.")
	var loads []string
	for _, rd := range c.Rounds {
		for _, lang := range Languages {
			if tf, _ := rd.pair(lang); tf != nil {
				loads = append(loads, fmt.Sprintf("%s %.2f", lang, tf.Machine.LoadAvgBefore[0]))
			}
		}
	}
	fmt.Fprintf(w, "load average at each round's TaskForge sides: %s\n", strings.Join(loads, ", "))
	fmt.Fprintf(w, "PostgreSQL settings: %s\n", m.settingsLine())
	if len(c.ServeEnv) > 0 {
		fmt.Fprintf(w, "TaskForge's serve ran with %s\n", strings.Join(c.ServeEnv, " "))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "figure\tunit\tTaskForge\tpeer\tratio (median [min–max])\ttarget\t\n")
	for i, r := range c.Ratios {
		if i == 0 || c.Ratios[i-1].Language != r.Language {
			fmt.Fprintf(tw, "%s\t\t\t\t\t\t\n", strings.ToUpper(r.Language[:1])+r.Language[1:])
		}
		if len(r.Ratios) == 0 {
			fmt.Fprintf(tw, "%s\t%s\tnot measured\t\t\t%s\t\n", r.Figure, r.Unit, r.Target)
			continue
		}
		peer := fmt.Sprintf("%s %s", strings.Join(uniq(r.PeerNames), "/"), number(median(r.Peer)))
		verdict := r.Target
		if r.Met != nil {
			verdict += map[bool]string{true: ": met", false: ": missed"}[*r.Met]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f [%.2f–%.2f]\t%s\t\n", r.Figure, r.Unit, number(median(r.TaskForge)), peer,
			r.Median, slices.Min(r.Ratios), slices.Max(r.Ratios), verdict)
	}
	return tw.Flush()
}

// number prints a figure with the precision its size deserves.
func number(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func uniq(names []string) []string {
	var out []string
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
