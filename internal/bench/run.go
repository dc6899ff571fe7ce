package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/taskforge/taskforge/client"
)

// runner is one Run.
type runner struct {
	cfg    Config
	rng    *rand.Rand
	procs  procSet
	work   string
	rdb    *redis.Client
	prog   progress
	report *Report
}

// Run runs the configured experiments and returns their report. It starts every
// process it needs and stops all of them before it returns, whatever happens; a
// failed step ends the run, and the report then holds what was measured so far
// with the error recorded on the failed step. Failed checks (a task not done, a
// wrong history) do not end the run: they are listed in Report.Problems.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the taskforge binary: %w", err)
		}
		cfg.Binary = exe
	}
	r := &runner{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		prog: progress{w: cfg.Progress, tty: isTerminal(cfg.Progress)}}
	r.report = &Report{SchemaVersion: SchemaVersion, StartedAt: time.Now().UTC(), Config: cfg}
	defer r.procs.killAll()

	removeWork := false
	if cfg.WorkDir == "" {
		dir, err := os.MkdirTemp("", "taskforge-bench-")
		if err != nil {
			return nil, err
		}
		r.work, removeWork = dir, !cfg.KeepWorkDir
	} else {
		if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
			return nil, err
		}
		r.work = cfg.WorkDir
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	ropts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("redis URL: %w", err)
	}
	ropts.Protocol, ropts.DisableIdentity = 2, true
	ropts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	r.rdb = redis.NewClient(ropts)
	defer r.rdb.Close()
	if err := r.describeMachine(ctx); err != nil {
		return nil, err
	}

	err = r.runAll(ctx)
	r.prog.clear()
	r.procs.killAll()
	r.report.Machine.LoadAvgAfter = loadAvg()
	r.report.FinishedAt = time.Now().UTC()
	r.report.computeMedians()
	if err != nil {
		r.warnf("logs kept in %s", r.work)
	} else if removeWork {
		_ = os.RemoveAll(r.work)
	}
	return r.report, err
}

// runAll runs the experiments, run by run, so that the repetitions of one
// experiment are spread over the whole time rather than taken back to back.
func (r *runner) runAll(ctx context.Context) error {
	runs := 0
	for _, e := range r.cfg.Experiments {
		runs = max(runs, r.cfg.runsOf(e))
	}
	for run := 1; run <= runs; run++ {
		for _, exp := range r.cfg.Experiments {
			if run > r.cfg.runsOf(exp) {
				continue
			}
			if err := r.runExperiment(ctx, exp, run); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *runner) runExperiment(ctx context.Context, exp string, run int) error {
	c := r.cfg
	switch exp {
	case ExpNoop:
		for _, l := range c.E1.Layouts {
			res, err := r.drain(ctx, drainSpec{exp: exp, run: run, layout: l, tasks: c.E1.Tasks, warmup: c.E1.Warmup,
				handler: "noop", payload: map[string]any{}, profile: c.ProfileDir != ""})
			r.report.E1 = append(r.report.E1, res)
			if err != nil {
				return err
			}
		}
	case ExpSleep:
		for _, l := range c.E2.Layouts {
			res, err := r.drain(ctx, drainSpec{exp: exp, run: run, layout: l, tasks: c.E2.Tasks, warmup: c.E2.Warmup,
				handler: "sleep", payload: map[string]any{"ms": c.SleepMs}, sleepMs: c.SleepMs})
			r.report.E2 = append(r.report.E2, res)
			if err != nil {
				return err
			}
		}
	case ExpLatency:
		res, err := r.latency(ctx, run)
		r.report.Latency = append(r.report.Latency, res)
		return err
	case ExpEnqueue:
		res, err := r.roundTrips(ctx, run)
		r.report.Enqueue = append(r.report.Enqueue, res)
		return err
	case ExpRetry:
		for _, l := range c.E5.Layouts {
			res, err := r.retry(ctx, run, l)
			r.report.E5 = append(r.report.E5, res)
			if err != nil {
				return err
			}
		}
	case ExpScale:
		return r.scale(ctx, run)
	case ExpFair:
		return r.fair(ctx, run)
	case ExpRecovery:
		for _, v := range c.E6.Variants {
			res, err := r.recovery(ctx, run, v)
			r.report.E6 = append(r.report.E6, res)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// problemf records a failed check.
func (r *runner) problemf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.report.Problems = append(r.report.Problems, msg)
	r.warnf("%s", msg)
}

// warnf writes a line to the progress writer (stderr), if any.
func (r *runner) warnf(format string, args ...any) {
	r.prog.println("warning: " + fmt.Sprintf(format, args...))
}

// describeMachine fills the report's Machine and checks that both servers answer.
func (r *runner) describeMachine(ctx context.Context) error {
	m := &r.report.Machine
	m.Hostname, _ = os.Hostname()
	m.Cores = runtime.NumCPU()
	m.GoVersion = runtime.Version()
	m.LoadAvgBefore = loadAvg()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				rev = s.Value[:min(12, len(s.Value))]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "+dirty"
			}
		}
		m.Revision = rev + dirty
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, r.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	var mayCreate bool
	if err := conn.QueryRow(cctx, serverInfo).Scan(&m.Postgres, &mayCreate); err != nil {
		return fmt.Errorf("query PostgreSQL: %w", err)
	}
	if !mayCreate {
		return errors.New("the PostgreSQL role of the database URL may not create databases")
	}
	if m.PostgresSettings, err = postgresSettings(cctx, conn); err != nil {
		return err
	}
	info, err := r.rdb.Info(cctx, "server").Result()
	if err != nil {
		return fmt.Errorf("reach Redis: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			m.Redis = v
		}
	}
	return nil
}

// deleteKeys unlinks every Redis key matching pattern.
func (r *runner) deleteKeys(ctx context.Context, pattern string) error {
	var cursor uint64
	for {
		keys, next, err := r.rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := r.rdb.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// enqueueBatches enqueues n tasks with payload, client.MaxBatch per request, and
// returns their ids.
func enqueueBatches(ctx context.Context, api *client.Client, queue string, n int, payload any, group string) ([]string, error) {
	ids := make([]string, 0, n)
	for len(ids) < n {
		batch := make([]client.NewTask, min(client.MaxBatch, n-len(ids)))
		for i := range batch {
			batch[i] = client.NewTask{Payload: payload, Group: group}
		}
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		created, err := api.EnqueueBatchMinimal(cctx, queue, batch)
		cancel()
		if err != nil {
			return ids, err
		}
		ids = append(ids, created...)
	}
	return ids, nil
}

// progress is a one-line progress display, rewritten in place on a terminal;
// elsewhere (a log file, CI) only the lines of println appear.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	last  time.Time
	shown bool
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// update rewrites the line, at most five times a second unless force is set.
func (p *progress) update(force bool, format string, args ...any) {
	if p.w == nil || !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !force && time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\r\033[K%s", fmt.Sprintf(format, args...))
	p.shown = true
}

// println ends the progress line, if shown, and writes line below it.
func (p *progress) println(line string) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
	fmt.Fprintln(p.w, line)
}

// clear erases the progress line.
func (p *progress) clear() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// postgresSettings reads the server's values of reportedSettings.
func postgresSettings(ctx context.Context, conn *pgx.Conn) (map[string]string, error) {
	rows, err := conn.Query(ctx, settingValues, reportedSettings)
	if err != nil {
		return nil, fmt.Errorf("read PostgreSQL's settings: %w", err)
	}
	out := map[string]string{}
	var name, value string
	_, err = pgx.ForEachRow(rows, []any{&name, &value}, func() error {
		out[name] = value
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read PostgreSQL's settings: %w", err)
	}
	return out, nil
}
