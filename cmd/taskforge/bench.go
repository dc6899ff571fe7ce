package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/internal/bench"
)

// benchCommand is `taskforge bench`: the end-to-end benchmark harness (package bench).
func benchCommand() *cobra.Command {
	var (
		cfg                             bench.Config
		jsonOut, experiments, variants  string
		e1Layouts, e2Layouts, e5Layouts string
		latLayout, victims, survivors   string
		scaleQueues, scaleRows          string
		fairLayout, fairE1Layout        string
		fairBacklog, fairSpread         string
		fairParts                       string
		quiet                           bool
		workerCommands                  = defaultWorkerCommands()
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run the end-to-end benchmarks (E1, E2, latency, E5, E6, scale, fair) against real PostgreSQL and Redis",
		Long: `Run TaskForge's end-to-end benchmarks. The harness starts its own serve and
reference worker processes (this same binary), each step in a fresh database
created on the PostgreSQL server and dropped after, with a fresh Redis key
prefix, and prints a table (and with --json, writes every figure as JSON).
Unless both --database-url and --redis-url are given, it starts a throwaway
PostgreSQL cluster configured as production runs it (autovacuum and fsync on,
shared_buffers 512MB, max_wal_size 4GB) and a throwaway Redis, and removes them
after; the report records the PostgreSQL settings it ran with.

  e1       5,000 no-op tasks enqueued first, drained by each worker layout
  e2       1,000 × 50 ms sleeps, throughput and parallel efficiency
  latency  100 tasks/s for 10 s to idle long-polling workers, receipt p50/p95/p99
  enqueue  1,000 enqueues of one producer, back to back: each round trip
  e5       every task fails once, then succeeds: checks every history
  e6       workers SIGKILLed holding tasks: lease expiry → re-delivery, under the
           server's default leases (30 s) and short ones (2 s)
  scale    only when named: idle CPU and enqueue → long-poll latency with 1, 1,000
           and 10,000 queues (--scale-queues); stats, /metrics and dashboard feed
           latency and PostgreSQL CPU with 100k, 1M and 10M tasks in a queue
           (--scale-rows; 10M takes minutes to load)
  fair     only when named: fair queues. A group of 1,000,000 due tasks
           (--fair-backlog) draining beside 100 groups that enqueue 10 each:
           their enqueue → start and the big group's share meanwhile; 100,000
           due tasks (--fair-spread) in groups of --fair-spread-depth, then in one: idle CPU,
           drain throughput, a new group's enqueue → start; E1 on a fair queue
           with one group against a plain one (--fair-e1-layout), one after
           the other

A layout PxC is P worker processes with --concurrency C each: 16x1 is sixteen
workers polling for one task at a time, 1x16 one process polling for up to 16.
PxC+F sets each worker's --prefetch to F (default: its concurrency): 16x1+0 prefetches nothing.
Figures come from the attempts table (database clock); see docs/benchmarks.md.
Exit status 1 when a step failed or a check did not hold.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			parse := func(s string, into *[]bench.Layout) {
				if err == nil {
					*into, err = bench.ParseLayouts(s)
				}
			}
			parseOne := func(s string, into *bench.Layout) {
				if err == nil {
					*into, err = bench.ParseLayout(s)
				}
			}
			parse(e1Layouts, &cfg.E1.Layouts)
			parse(e2Layouts, &cfg.E2.Layouts)
			parse(e5Layouts, &cfg.E5.Layouts)
			parseOne(latLayout, &cfg.Latency.Layout)
			parseOne(victims, &cfg.E6.Victims)
			parseOne(survivors, &cfg.E6.Survivors)
			if err == nil {
				cfg.Scale.Queues, err = bench.ParseCounts(scaleQueues)
			}
			if err == nil {
				cfg.Scale.Rows, err = bench.ParseCounts(scaleRows)
			}
			parseOne(fairLayout, &cfg.Fair.Layout)
			parseOne(fairE1Layout, &cfg.Fair.E1Layout)
			for _, c := range []struct {
				flag, value string
				into        *int
			}{{"--fair-backlog", fairBacklog, &cfg.Fair.Backlog}, {"--fair-spread", fairSpread, &cfg.Fair.Spread}} {
				if err != nil {
					break
				}
				var n []int
				if n, err = bench.ParseCounts(c.value); err == nil && len(n) != 1 {
					err = fmt.Errorf("%s: want one count, got %q", c.flag, c.value)
				}
				if err == nil {
					*c.into = n[0]
				}
			}
			if err != nil {
				return usageError(err)
			}
			cfg.Experiments = splitList(experiments)
			cfg.Fair.Parts = splitList(fairParts)
			for _, name := range splitList(variants) {
				i := slices.IndexFunc(bench.DefaultLeaseVariants, func(v bench.LeaseVariant) bool { return v.Name == name })
				if i < 0 {
					return usagef("--e6-variants: unknown variant %q (want default, short)", name)
				}
				cfg.E6.Variants = append(cfg.E6.Variants, bench.DefaultLeaseVariants[i])
			}
			if cfg.Language != bench.LanguageGo {
				cfg.WorkerCommand = languageCommand(workerCommands[cfg.Language])
			}
			if err := cfg.WithDefaults().Validate(); err != nil {
				return usageError(err)
			}
			stopServers, err := benchServers(cmd, &cfg.DatabaseURL, &cfg.RedisURL)
			if err != nil {
				return err
			}
			defer stopServers()
			if !quiet {
				cfg.Progress = cmd.ErrOrStderr()
			}
			report, runErr := bench.Run(cmd.Context(), cfg)
			if report == nil {
				return runErr
			}
			if err := report.WriteTable(cmd.OutOrStdout()); err != nil {
				return err
			}
			if jsonOut != "" {
				if err := writeJSONFile(jsonOut, report.WriteJSON); err != nil {
					return errors.Join(runErr, err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "results written to %s\n", jsonOut)
			}
			if runErr != nil {
				return runErr
			}
			if len(report.Problems) > 0 {
				return fmt.Errorf("%d check(s) failed", len(report.Problems))
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&jsonOut, "json", "", "write every figure to this JSON file")
	benchServerFlags(cmd, &cfg.DatabaseURL, &cfg.RedisURL)
	fs.StringVar(&cfg.DatabaseTemplate, "database-template", "", "a database on the server that each step's database copies, data and all (say 10M finished tasks in history: internal/bench/history-template.sh), instead of starting empty")
	fs.StringVar(&experiments, "experiments", strings.Join(bench.DefaultExperiments, ","),
		"experiments to run, comma-separated, among "+strings.Join(bench.AllExperiments, ", "))
	fs.IntVar(&cfg.Runs, "runs", 3, "repetitions of e1, e2, latency and enqueue (the table shows medians)")
	fs.IntVar(&cfg.CheckRuns, "check-runs", 1, "repetitions of e5 and e6")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of every random choice (e6's kill moments)")
	fs.IntVar(&cfg.E1.Tasks, "e1-tasks", 5000, "e1: tasks per step")
	fs.IntVar(&cfg.E1.Warmup, "e1-warmup", 500, "e1: excluded warm-up tasks per step (-1: none)")
	fs.StringVar(&e1Layouts, "e1-layouts", "1x1,4x1,8x1,16x1,1x16,4x16", "e1: worker layouts PROCSxCONCURRENCY[+PREFETCH][/plain|/batched]")
	fs.IntVar(&cfg.E2.Tasks, "e2-tasks", 1000, "e2: tasks per step")
	fs.IntVar(&cfg.E2.Warmup, "e2-warmup", 50, "e2: excluded warm-up tasks per step (-1: none)")
	fs.StringVar(&e2Layouts, "e2-layouts", "1x1,4x1,8x1,16x1,16x1+0", "e2: worker layouts")
	fs.IntVar(&cfg.SleepMs, "e2-sleep-ms", 50, "e2: each task's sleep")
	fs.Float64Var(&cfg.Latency.Rate, "latency-rate", 100, "latency: enqueues per second")
	fs.DurationVar(&cfg.Latency.Duration, "latency-duration", 10*time.Second, "latency: measured stream length")
	fs.DurationVar(&cfg.Latency.Warmup, "latency-warmup", time.Second, "latency: excluded warm-up stream (-1s: none)")
	fs.StringVar(&latLayout, "latency-layout", "4x1", "latency: worker layout")
	fs.IntVar(&cfg.Enqueue.Tasks, "enqueue-tasks", 1000, "enqueue: requests measured")
	fs.IntVar(&cfg.Enqueue.Warmup, "enqueue-warmup", 100, "enqueue: excluded requests sent first (-1: none)")
	fs.IntVar(&cfg.E5.Tasks, "e5-tasks", 1000, "e5: tasks per step")
	fs.StringVar(&e5Layouts, "e5-layouts", "8x1", "e5: worker layouts")
	fs.DurationVar(&cfg.E5.BackoffBase, "e5-backoff", 10*time.Millisecond, "e5: the queue's retry backoff base")
	fs.StringVar(&variants, "e6-variants", "default,short", "e6: lease variants (default: 30s lease, 10s heartbeats, 15s watchdog; short: 2s, 500ms, 1s)")
	fs.StringVar(&victims, "e6-victims", "4x4", "e6: layout of the workers killed, one task per slot")
	fs.StringVar(&survivors, "e6-survivors", "4x8", "e6: layout of the idle workers that take the tasks over")
	fs.StringVar(&scaleQueues, "scale-queues", "1,1000,10000", "scale: queue counts of the queues curve (k and M suffixes allowed; none skips it)")
	fs.StringVar(&scaleRows, "scale-rows", "100k,1M,10M", "scale: pending-task counts of the rows curve (none skips it)")
	fs.DurationVar(&cfg.Scale.Settle, "scale-settle", 3*time.Second, "scale: wait after serve is ready before measuring")
	fs.DurationVar(&cfg.Scale.IdleWindow, "scale-idle-window", 15*time.Second, "scale: idle CPU window of each queues point")
	fs.IntVar(&cfg.Scale.LatencySamples, "scale-latency-samples", 50, "scale: enqueue → long-poll receipts per queues point")
	fs.IntVar(&cfg.Scale.Samples, "scale-samples", 20, "scale: stats requests, metrics scrapes and feed refreshes per rows point")
	fs.StringVar(&fairBacklog, "fair-backlog", "1M", "fair: the big group's due tasks beside the small groups (k and M suffixes allowed)")
	fs.StringVar(&fairSpread, "fair-spread", "100k", "fair: due tasks in many groups (of --fair-spread-depth each), then in one")
	fs.IntVar(&cfg.Fair.SpreadDepth, "fair-spread-depth", 1, "fair: due tasks of each group in the spread part's many groups (above 1: a buffered head and pending tasks behind it)")
	fs.StringVar(&fairLayout, "fair-layout", "4x16", "fair: worker layout of the backlog and spread drains")
	fs.StringVar(&fairE1Layout, "fair-e1-layout", "4x16", "fair: worker layout of E1 on a fair queue against a plain one")
	fs.IntVar(&cfg.Fair.E1Tasks, "fair-e1-tasks", 5000, "fair: tasks of each E1 drain")
	fs.DurationVar(&cfg.Fair.IdleWindow, "fair-idle-window", 10*time.Second, "fair: steady idle CPU window of each spread step, after its settling")
	fs.StringVar(&fairParts, "fair-parts", strings.Join(bench.FairParts, ","), "fair: parts to run, among "+strings.Join(bench.FairParts, ", "))
	fs.DurationVar(&cfg.Scale.ScrapeEvery, "scale-scrape-every", 2500*time.Millisecond, "scale: pause between metrics scrapes in the rows window")
	fs.StringVar(&cfg.ProfileDir, "cpuprofile-dir", "", "write a CPU profile of serve during each e1 window into this directory")
	fs.StringArrayVar(&cfg.ServeEnv, "serve-env", nil, serveEnvUsage)
	fs.StringVar(&cfg.Language, "language", bench.LanguageGo, "the SDK whose worker runs the layouts: "+strings.Join(bench.Languages, ", "))
	fs.StringArrayVar(&cfg.WorkerEnv, "worker-env", nil, "a setting KEY=VALUE for every worker process (repeatable): --worker-env TASKFORGE_CPROFILE=/tmp/w.prof")
	languageFlags(cmd, "worker", workerCommands)
	fs.StringVar(&cfg.WorkDir, "work-dir", "", "directory for the processes' logs (default: a temporary one, removed unless a step fails)")
	fs.BoolVar(&cfg.KeepWorkDir, "keep-logs", false, "keep the processes' logs")
	fs.BoolVar(&quiet, "quiet", false, "no progress line on stderr")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	cmd.AddCommand(benchServeProfiledCommand(), benchCompareCommand(), benchWithServersCommand())
	return cmd
}

// serveEnvUsage describes --serve-env, a flag of both bench commands.
const serveEnvUsage = "a setting KEY=VALUE for every serve process, on top of its defaults (repeatable): --serve-env GOMAXPROCS=1"

// benchCompareCommand is `taskforge bench compare`: TaskForge against River and
// Asynq (the peers program of internal/bench/peers), round after round, as ratios.
func benchCompareCommand() *cobra.Command {
	var (
		cc                          bench.CompareConfig
		jsonOut, workers, languages string
		quiet                       bool
		workerCommands              = defaultWorkerCommands()
		peerCommands                = defaultPeerCommands()
	)
	cmd := &cobra.Command{
		Use:   "compare --peers PROGRAM",
		Short: "Run the same workloads on TaskForge and on River and Asynq, and print TaskForge / best-peer ratios",
		Long: `Run TaskForge's workloads and the same ones on River and Asynq, the in-process
Go queues TaskForge is compared with, round after round on the same PostgreSQL
and Redis, and print each figure as TaskForge / best peer, with its target.

The peers run in a program of their own (internal/bench/peers, a module apart so
that TaskForge never depends on them); build it first, or use ` + "`make bench-compare`" + `.
TaskForge's workers are plain HTTP loops written from the API reference: "plain"
polls one task and acks it alone, "batched" polls up to --batch tasks and acks
them in one request. Each round runs E1 (no-op tasks enqueued first, then
drained) at each --workers count, its preload, E2 (50 ms tasks, 16 workers),
latency (enqueue → worker at 100 tasks/s, 16 idle workers) and one producer's
enqueues back to back. Both sides run on one PostgreSQL and one Redis: throwaway
ones configured as production runs them, unless both URLs are given. TaskForge
runs first in odd rounds, the peers first in even ones; a ratio is the median of the rounds' ratios, each taken between
figures measured minutes apart.
Exit status 1 when a round failed; a missed target is not a failure.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cc.Peers == "" {
				return usagef("--peers is required: build internal/bench/peers (make bench-compare does)")
			}
			for _, w := range splitList(workers) {
				n, err := strconv.Atoi(w)
				if err != nil || n < 1 {
					return usagef("--workers: %q is not a positive count", w)
				}
				cc.Workers = append(cc.Workers, n)
			}
			cc.Languages = splitList(languages)
			cc.LanguagePeers, cc.WorkerCommands = map[string][]string{}, map[string][]string{}
			for _, lang := range cc.Languages {
				if lang != bench.LanguageGo {
					cc.LanguagePeers[lang] = languageCommand(peerCommands[lang])
					cc.WorkerCommands[lang] = languageCommand(workerCommands[lang])
				}
			}
			if err := cc.Validate(); err != nil {
				return usageError(err)
			}
			stopServers, err := benchServers(cmd, &cc.Bench.DatabaseURL, &cc.Bench.RedisURL)
			if err != nil {
				return err
			}
			defer stopServers()
			if !quiet {
				cc.Progress = cmd.ErrOrStderr()
			}
			res, runErr := bench.Compare(cmd.Context(), cc)
			if res == nil {
				return runErr
			}
			if err := res.WriteTable(cmd.OutOrStdout()); err != nil {
				return err
			}
			if jsonOut != "" {
				if err := writeJSONFile(jsonOut, res.WriteJSON); err != nil {
					return errors.Join(runErr, err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "results written to %s\n", jsonOut)
			}
			return runErr
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cc.Peers, "peers", "", "the built Go peers program (internal/bench/peers)")
	fs.StringVar(&jsonOut, "json", "", "write both sides' figures and the ratios to this JSON file")
	benchServerFlags(cmd, &cc.Bench.DatabaseURL, &cc.Bench.RedisURL)
	fs.IntVar(&cc.Rounds, "rounds", 3, "rounds of both sides; ratios are medians over them")
	fs.StringVar(&workers, "workers", "1,16,100", "E1 worker counts")
	fs.IntVar(&cc.Batch, "batch", 50, "tasks a batched TaskForge worker polls for and acks at once")
	fs.IntVar(&cc.Tasks, "tasks", 10000, "tasks per E1 drain and preload")
	fs.IntVar(&cc.SleepTasks, "e2-tasks", 1000, "tasks per E2 drain")
	fs.IntVar(&cc.LatencyTasks, "latency-tasks", 1000, "tasks of the latency stream (100 a second)")
	fs.IntVar(&cc.EnqueueTasks, "enqueue-tasks", 1000, "enqueues timed back to back")
	fs.StringArrayVar(&cc.Bench.ServeEnv, "serve-env", nil, serveEnvUsage)
	fs.StringVar(&languages, "languages", bench.LanguageGo, "languages whose SDK is compared with that language's peers: "+strings.Join(bench.Languages, ","))
	languageFlags(cmd, "worker", workerCommands)
	languageFlags(cmd, "peers", peerCommands)
	fs.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	return cmd
}

// defaultWorkerCommands and defaultPeerCommands are the commands, relative to
// the repository's root, of each language's SDK benchmark worker and peers
// program; flags (languageFlags) override them.
func defaultWorkerCommands() map[string]*string {
	return map[string]*string{
		bench.LanguageTypeScript: ptr("node sdk/typescript/dist/bench/worker.js"),
		bench.LanguagePython:     ptr("python3 sdk/python/bench/worker.py"),
	}
}

func defaultPeerCommands() map[string]*string {
	return map[string]*string{
		bench.LanguageTypeScript: ptr("node internal/bench/peers/node/peers.mjs"),
		bench.LanguagePython:     ptr("/usr/bin/python3 internal/bench/peers/python/peers.py"),
	}
}

func ptr(s string) *string { return &s }

// languageFlags registers --<kind>-typescript and --<kind>-python, each a
// command (words split at spaces) overriding the entry of commands.
func languageFlags(cmd *cobra.Command, kind string, commands map[string]*string) {
	for _, lang := range []string{bench.LanguageTypeScript, bench.LanguagePython} {
		what := "the SDK's benchmark worker"
		if kind == "peers" {
			what = "the peers program"
		}
		cmd.Flags().StringVar(commands[lang], kind+"-"+lang, *commands[lang], fmt.Sprintf("%s of %s (paths relative to the repository's root)", what, lang))
	}
}

// languageCommand splits a command at spaces and makes its relative file
// arguments (words with a slash, not flags) absolute, so that it runs from any
// directory.
func languageCommand(command *string) []string {
	words := strings.Fields(*command)
	for i, w := range words {
		if i > 0 && !filepath.IsAbs(w) && !strings.HasPrefix(w, "-") && strings.Contains(w, "/") {
			if abs, err := filepath.Abs(w); err == nil {
				words[i] = abs
			}
		}
	}
	return words
}

// benchServerFlags registers --database-url and --redis-url, whose defaults come from
// $DATABASE_URL and $REDIS_URL; benchServers reads them.
func benchServerFlags(cmd *cobra.Command, dbURL, redisURL *string) {
	cmd.Flags().StringVar(dbURL, "database-url", os.Getenv("DATABASE_URL"),
		"PostgreSQL server whose role may CREATE DATABASE; each step uses a fresh database there ($DATABASE_URL; "+
			"without it and --redis-url, a throwaway production-like cluster)")
	cmd.Flags().StringVar(redisURL, "redis-url", os.Getenv("REDIS_URL"),
		"Redis URL; each step uses a fresh key prefix ($REDIS_URL; without it and --database-url, a throwaway server)")
}

// benchServers returns the servers a bench command measures on: the two given,
// or, when neither URL is given, a throwaway PostgreSQL cluster with production
// settings and a throwaway Redis (bench.StartServers), whose URLs it writes into
// dbURL and redisURL and which stop removes. One URL without the other is a usage
// error: the two sides of a run must not mix servers.
func benchServers(cmd *cobra.Command, dbURL, redisURL *string) (stop func(), err error) {
	switch {
	case *dbURL != "" && *redisURL != "":
		return func() {}, nil
	case *dbURL != "" || *redisURL != "":
		return nil, usagef("give both --database-url and --redis-url ($DATABASE_URL, $REDIS_URL), or neither for throwaway servers")
	}
	fmt.Fprintln(cmd.ErrOrStderr(), "starting a throwaway PostgreSQL (production settings) and Redis")
	srv, err := bench.StartServers(cmd.Context())
	if err != nil {
		return nil, err
	}
	*dbURL, *redisURL = srv.DatabaseURL, srv.RedisURL
	return func() {
		if err := srv.Stop(); err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "taskforge: stop the throwaway servers:", err)
		}
	}, nil
}

// benchWithServersCommand is `taskforge bench with-servers -- COMMAND`: a command
// run against the throwaway servers the benchmarks use.
func benchWithServersCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "with-servers -- COMMAND [ARG...]",
		Short: "Run a command against a throwaway production-like PostgreSQL and a throwaway Redis",
		Long: `Start the servers ` + "`taskforge bench`" + ` measures on (a throwaway PostgreSQL
cluster with autovacuum and fsync on, shared_buffers 512MB, max_wal_size 4GB,
max_connections 500, and a throwaway Redis), run COMMAND with DATABASE_URL and
REDIS_URL naming them, then remove both. Exits with COMMAND's status.`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			srv, err := bench.StartServers(cmd.Context())
			if err != nil {
				return err
			}
			defer func() {
				if stopErr := srv.Stop(); stopErr != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "taskforge: stop the throwaway servers:", stopErr)
				}
			}()
			fmt.Fprintf(cmd.ErrOrStderr(), "DATABASE_URL=%s REDIS_URL=%s\n", srv.DatabaseURL, srv.RedisURL)
			c := exec.CommandContext(cmd.Context(), args[0], args[1:]...)
			c.Env = append(os.Environ(), "DATABASE_URL="+srv.DatabaseURL, "REDIS_URL="+srv.RedisURL)
			c.Stdin, c.Stdout, c.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
			c.WaitDelay = 30 * time.Second
			err = c.Run()
			var exit *exec.ExitError
			if errors.As(err, &exit) && exit.ExitCode() > 0 {
				return exitError{exit.ExitCode(), fmt.Errorf("%s: %w", args[0], err)}
			}
			return err
		},
	}
}

// benchServeProfiledCommand is `taskforge bench serve-profiled`: serve, plus a CPU
// profile of the window between SIGUSR1 and SIGUSR2 (the harness marks its
// measured windows so). Hidden: the harness runs it, people run serve.
func benchServeProfiledCommand() *cobra.Command {
	cmd := serveCommand()
	cmd.Use = strings.Join(bench.ProfiledServeArgs[1:], " ")
	cmd.Short = "serve, with a CPU profile of the window between SIGUSR1 and SIGUSR2"
	cmd.Hidden = true
	var path string
	cmd.Flags().StringVar(&path, "cpuprofile", "", "CPU profile to write (required)")
	serve := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) (err error) {
		if path == "" {
			return usagef("--cpuprofile is required")
		}
		p := bench.StartServeProfiler(path)
		defer func() { err = errors.Join(err, p.Stop()) }()
		return serve(c, args)
	}
	return cmd
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// writeJSONFile creates path and fills it with write.
func writeJSONFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
