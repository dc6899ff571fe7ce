package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/localpg"
)

// Timeouts of the harness's own waits.
const (
	startTimeout = 60 * time.Second // a serve answering /readyz, workers polling
	stallTimeout = 60 * time.Second // a wait whose count stops moving
	opTimeout    = 30 * time.Second // one API call or query
	copyTimeout  = 10 * time.Minute // a step's database copied from a large template
	pollEvery    = 100 * time.Millisecond
)

// ProfiledServeArgs is how the harness runs `serve` with a CPU profile: the binary
// must offer this command, which behaves as `serve` and takes --cpuprofile FILE
// (see ServeProfiler).
var ProfiledServeArgs = []string{"bench", "serve-profiled"}

// step is one measured step's private world: a fresh database, a fresh Redis key
// prefix, its own `serve` process, and the workers it starts.
type step struct {
	r       *runner
	name    string // also the name of its queue
	dbName  string
	dbURL   string
	prefix  string
	pool    *pgxpool.Pool
	serve   *proc
	url     string
	api     *client.Client
	workers []*proc
	sampler cpuSampler
}

// newStep creates the step's database and starts its serve process with the given
// extra environment; profile, when set, is the CPU profile serve writes.
func (r *runner) newStep(ctx context.Context, name string, serveEnv []string, profile string) (*step, error) {
	return r.newStepWith(ctx, name, serveEnv, profile, nil)
}

// newQueueStep is newStep (serve with its defaults) with one queue named after
// the step; it records the step's database and key prefix in st.
func (r *runner) newQueueStep(ctx context.Context, name, label string, st *Step) (*step, error) {
	r.prog.update(true, "%s: starting serve", label)
	s, err := r.newStep(ctx, name, nil, "")
	if err != nil {
		return nil, err
	}
	st.Database, st.RedisPrefix = s.dbName, s.prefix
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := s.api.CreateQueue(cctx, name, client.QueueSettings{}); err != nil {
		s.close()
		return nil, fmt.Errorf("create queue %s: %w", name, err)
	}
	return s, nil
}

// newPreparedStep is newStep that, before serve starts, migrates the step's
// database with the binary's `migrate` command and runs prepare on it (the scale
// experiment's bulk loads), so that serve starts on the prepared data as it would
// after a restart.
func (r *runner) newPreparedStep(ctx context.Context, name string, prepare func(context.Context, *step) error) (*step, error) {
	return r.newStepWith(ctx, name, nil, "", prepare)
}

func (r *runner) newStepWith(ctx context.Context, name string, serveEnv []string, profile string,
	prepare func(context.Context, *step) error) (_ *step, err error) {
	s := &step{r: r, name: name, dbName: "tf_bench_" + randomHex(6), prefix: "tfbench:" + randomHex(8)}
	s.sampler = cpuSampler{serve: map[int]bool{}, workers: map[int]bool{}, dbName: s.dbName}
	if err := createDatabase(ctx, r.cfg.DatabaseURL, s.dbName, r.cfg.DatabaseTemplate); err != nil {
		return nil, fmt.Errorf("create database %s: %w", s.dbName, err)
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.dbURL = localpg.WithDatabase(r.cfg.DatabaseURL, s.dbName)
	openPool := func() error {
		pcfg, err := pgxpool.ParseConfig(s.dbURL)
		if err != nil {
			return err
		}
		pcfg.MaxConns = 4
		if s.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
			return fmt.Errorf("connect to %s: %w", s.dbName, err)
		}
		return nil
	}
	if prepare != nil {
		if err := s.migrate(ctx); err != nil {
			return nil, err
		}
		if err := openPool(); err != nil {
			return nil, err
		}
		if err := prepare(ctx, s); err != nil {
			return nil, err
		}
	}
	if err := s.startServe(ctx, serveEnv, profile); err != nil {
		return nil, err
	}
	if s.pool == nil {
		if err := openPool(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// migrate applies the binary's migrations to the step's database (`taskforge
// migrate`), so that a bulk load sees the schema, and the triggers, of the server
// under test.
func (s *step) migrate(ctx context.Context) error {
	p, err := s.r.procs.start(s.name+" migrate", s.r.cfg.Binary, []string{"migrate"},
		childEnv("DATABASE_URL="+s.dbURL), filepath.Join(s.r.work, s.name+"-migrate.log"))
	if err != nil {
		return err
	}
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	case <-t.C:
		p.kill()
		return fmt.Errorf("migrate did not finish within %s; its log ends:\n%s", startTimeout, p.logTail(15))
	}
	if p.err != nil {
		return fmt.Errorf("migrate: %v; its log ends:\n%s", p.err, p.logTail(15))
	}
	return nil
}

// startServe starts serve on a free port and waits until it is ready; another
// process taking the port in between makes it try again.
func (s *step) startServe(ctx context.Context, serveEnv []string, profile string) error {
	args := []string{"serve"}
	if profile != "" {
		args = append(append(args[:0:0], ProfiledServeArgs...), "--cpuprofile", profile)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		// Later entries win: the harness's defaults, then Config.ServeEnv, then the
		// step's own settings.
		env := childEnv(slices.Concat([]string{
			"DATABASE_URL=" + s.dbURL,
			"REDIS_URL=" + s.r.cfg.RedisURL,
			"TASKFORGE_REDIS_PREFIX=" + s.prefix,
			"TASKFORGE_LISTEN=" + addr,
			"TASKFORGE_LOG_LEVEL=warn",
			"TASKFORGE_LOG_FORMAT=text",
		}, s.r.cfg.ServeEnv, serveEnv)...)
		p, err := s.r.procs.start(s.name+" serve", s.r.cfg.Binary, args, env, filepath.Join(s.r.work, s.name+"-serve.log"))
		if err != nil {
			return err
		}
		s.url = "http://" + addr
		if lastErr = waitReady(ctx, p, s.url); lastErr == nil {
			s.serve = p
			s.sampler.serve[p.pid()] = true
			if s.api, err = client.New(s.url); err != nil {
				return err
			}
			return nil
		}
		p.stop(5 * time.Second)
		if !strings.Contains(p.logTail(20), "address already in use") {
			break
		}
	}
	return lastErr
}

// waitReady polls serve's /readyz until it answers 200.
func waitReady(ctx context.Context, p *proc, base string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v); its log ends:\n%s", p.name, p.err, p.logTail(15))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w; its log ends:\n%s", p.name, startTimeout, ctx.Err(), p.logTail(15))
		case <-time.After(pollEvery):
		}
	}
}

// workerEnv is what the harness sets for its worker processes. They are load
// generators sharing the machine with serve and PostgreSQL: one Go thread each
// (GOMAXPROCS=1), as a worker loop in most languages has, rather than one per core,
// whose runtime would spend the CPU it takes from serve and PostgreSQL waking and
// parking threads.
var workerEnv = []string{"GOMAXPROCS=1"}

// startWorkers starts layout.Procs reference workers serving queue with handler,
// and waits until each has polled once. role names them: <step>-<role>-<i>.
func (s *step) startWorkers(ctx context.Context, layout Layout, handler, role string) ([]*proc, []string, error) {
	var ps []*proc
	var ids []string
	for i := range layout.Procs {
		id := fmt.Sprintf("%s-%s-%d", s.name, role, i)
		bin, args, env := s.workerCommand(layout, handler, id)
		p, err := s.r.procs.start(id, bin, args, env, filepath.Join(s.r.work, id+".log"))
		if err != nil {
			return ps, ids, err
		}
		ps, ids = append(ps, p), append(ids, id)
		s.workers = append(s.workers, p)
		s.sampler.workers[p.pid()] = true
	}
	err := s.waitCount(ctx, "workers polling", registeredWorkers, []any{ids}, len(ids), startTimeout, ps, nil)
	return ps, ids, err
}

// workerCommand is how one worker of the layout runs: the reference worker, or
// for another language its Config.WorkerCommand, configured through the
// environment.
func (s *step) workerCommand(layout Layout, handler, id string) (bin string, args, env []string) {
	c := s.r.cfg
	if len(c.WorkerCommand) == 0 || layout.Protocol != "" {
		args = []string{"worker", "--server", s.url, "--queue", s.name + "=" + handler,
			"--concurrency", strconv.Itoa(layout.Concurrency), "--worker-id", id,
			"--log-level", "warn", "--grace", "1s"}
		return c.Binary, append(args, layout.workerArgs()...), childEnv(slices.Concat(workerEnv, c.WorkerEnv)...)
	}
	env = []string{"TASKFORGE_URL=" + s.url, "QUEUE=" + s.name, "HANDLER=" + handler,
		"CONCURRENCY=" + strconv.Itoa(layout.Concurrency), "WORKER_ID=" + id}
	if layout.Prefetch != 0 {
		env = append(env, "PREFETCH="+strconv.Itoa(max(layout.Prefetch, 0)))
	}
	return c.WorkerCommand[0], c.WorkerCommand[1:], childEnv(slices.Concat(env, c.WorkerEnv)...)
}

// stopWorkers stops the given workers (SIGTERM, then SIGKILL).
func (s *step) stopWorkers(ps []*proc) {
	for _, p := range ps {
		_ = p.signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		p.stop(10 * time.Second)
	}
}

// waitCount polls query until its count reaches want. It fails when the count has
// not moved for stall, when serve or one of watch exits, or when ctx ends. Each
// new count is passed to onCount.
func (s *step) waitCount(ctx context.Context, what, query string, args []any, want int, stall time.Duration,
	watch []*proc, onCount func(int)) error {
	last, lastMove := -1, time.Now()
	for {
		var n int
		qctx, cancel := context.WithTimeout(ctx, opTimeout)
		err := s.pool.QueryRow(qctx, query, args...).Scan(&n)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if n != last {
			last, lastMove = n, time.Now()
			if onCount != nil {
				onCount(n)
			}
		}
		if n >= want {
			return nil
		}
		if time.Since(lastMove) > stall {
			return fmt.Errorf("wait for %s: stuck at %d of %d for %s", what, n, want, stall)
		}
		for _, p := range append([]*proc{s.serve}, watch...) {
			if p.exited() {
				return fmt.Errorf("wait for %s: %s exited (%v); its log ends:\n%s", what, p.name, p.err, p.logTail(15))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// waitTerminal waits until queue holds want tasks in a final state, polling the
// cheap tally count (countTerminalTally). checkTerminal then checks that count
// against the table's own, outside the measured window.
func (s *step) waitTerminal(ctx context.Context, what, queue string, want int, watch []*proc, onCount func(int)) error {
	return s.waitCount(ctx, what, countTerminalTally, []any{queue}, want, stallTimeout, watch, onCount)
}

// checkTerminal fails unless the tally's count of queue's finished tasks is the
// table's (countTerminal).
func (s *step) checkTerminal(ctx context.Context, queue string) error {
	var tallied, counted int
	qctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if err := s.pool.QueryRow(qctx, countTerminalTally, queue).Scan(&tallied); err != nil {
		return fmt.Errorf("count finished tasks: %w", err)
	}
	if err := s.pool.QueryRow(qctx, countTerminal, queue).Scan(&counted); err != nil {
		return fmt.Errorf("count finished tasks: %w", err)
	}
	if counted != tallied {
		return fmt.Errorf("the tally counts %d finished tasks of %s, the table %d", tallied, queue, counted)
	}
	return nil
}

// close stops the step's processes and removes its database and Redis keys.
func (s *step) close() {
	s.stopWorkers(s.workers)
	if s.serve != nil {
		s.serve.stop(20 * time.Second)
	}
	if s.pool != nil {
		s.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := localpg.DropDatabase(ctx, s.r.cfg.DatabaseURL, s.dbName); err != nil {
		s.r.warnf("drop database %s: %v", s.dbName, err)
	}
	if err := s.r.deleteKeys(ctx, s.prefix+":*"); err != nil {
		s.r.warnf("delete Redis keys %s:*: %v", s.prefix, err)
	}
}

// cpu samples the CPU time of the step's processes and of PostgreSQL and Redis.
func (s *step) cpu() (cpuSample, error) { return s.sampler.sample() }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// createDatabase creates database name, bounded by opTimeout, or as a copy of
// template (Config.DatabaseTemplate), bounded by copyTimeout.
func createDatabase(ctx context.Context, admin, name, template string) error {
	if template == "" {
		ctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		return localpg.CreateDatabase(ctx, admin, name)
	}
	ctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	// FILE_COPY: a checkpoint and a copy of the files, where the default (WAL_LOG)
	// would write every block of a large template into the WAL.
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " +
		pgx.Identifier{template}.Sanitize() + " STRATEGY FILE_COPY"
	for {
		err := localpg.AdminExec(ctx, admin, stmt)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use: a session on the template
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
