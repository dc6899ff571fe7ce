// Command peers runs TaskForge's benchmark workloads on River and Asynq, the
// in-process Go queues TaskForge is compared with, on the same machine and the
// same PostgreSQL and Redis: E1 (no-op tasks drained by 1, 16 and 100 workers),
// E1 preload (enqueue throughput of one client), E2 (50 ms tasks, 16 workers),
// latency (enqueue → handler start at 100 tasks/s), and one enqueue's round trip.
//
// It is a module of its own so that TaskForge never depends on River or Asynq;
// `make bench-peers` runs it. Handlers run in this process, as those systems run
// them; throughput is tasks over the span from the first handler's start to the
// last task's completion (River: its completed event, after its completer
// recorded the job; Asynq: the handler's return), latency is enqueue → handler
// start on this process's clock.
//
// River gets a database of its own, created and dropped; Asynq refuses to start
// on a Redis that already holds asynq:* keys, and deletes the ones it wrote.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Result is one figure of one system: what PeerResults holds per system.
type Result struct {
	System   string  `json:"system"`            // "river" or "asynq"
	Workload string  `json:"workload"`          // e1, e1-preload, e2, latency, enqueue
	Workers  int     `json:"workers,omitempty"` // handlers running at once
	Tasks    int     `json:"tasks"`
	Runs     int     `json:"runs"`
	PerSec   float64 `json:"per_sec,omitempty"` // median over runs: tasks/s
	P50Ms    float64 `json:"p50_ms,omitempty"`  // latency workloads: median over runs
	P95Ms    float64 `json:"p95_ms,omitempty"`
	P99Ms    float64 `json:"p99_ms,omitempty"`
}

// Report is what the program writes with --json.
type Report struct {
	StartedAt time.Time `json:"started_at"`
	Machine   string    `json:"machine"`
	Results   []Result  `json:"results"`
}

type config struct {
	databaseURL string
	redisAddr   string
	systems     []string
	workloads   []string
	workers     []int
	tasks       int
	sleepTasks  int
	latTasks    int
	rtTasks     int
	runs        int
}

func main() {
	var cfg config
	var systems, workloads, workers, jsonPath string
	flag.StringVar(&cfg.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		"PostgreSQL server for River (a database of its own is created and dropped)")
	flag.StringVar(&cfg.redisAddr, "redis-addr", "127.0.0.1:6379", "Redis for Asynq (its keys are deleted after)")
	flag.StringVar(&systems, "systems", "river,asynq", "systems to run")
	flag.StringVar(&workloads, "workloads", "e1,e1-preload,e2,latency,enqueue", "workloads to run")
	flag.StringVar(&workers, "workers", "1,16,100", "E1 worker counts")
	flag.IntVar(&cfg.tasks, "tasks", 20000, "tasks per E1 drain and preload")
	flag.IntVar(&cfg.sleepTasks, "sleep-tasks", 1600, "tasks per E2 drain (50 ms each)")
	flag.IntVar(&cfg.latTasks, "latency-tasks", 1000, "tasks of each latency stream (100 a second)")
	flag.IntVar(&cfg.rtTasks, "enqueue-tasks", 1000, "enqueues timed back to back per run")
	flag.IntVar(&cfg.runs, "runs", 3, "runs of each workload; figures are medians")
	flag.StringVar(&jsonPath, "json", "", "write the results as JSON to this file")
	flag.Parse()
	if min(cfg.tasks, cfg.sleepTasks, cfg.latTasks, cfg.rtTasks, cfg.runs) < 1 {
		log.Fatal("--tasks, --sleep-tasks, --latency-tasks, --enqueue-tasks and --runs must be at least 1")
	}
	cfg.systems = strings.Split(systems, ",")
	cfg.workloads = strings.Split(workloads, ",")
	for _, w := range strings.Split(workers, ",") {
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 {
			log.Fatalf("--workers: %q is not a positive number", w)
		}
		cfg.workers = append(cfg.workers, n)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep := Report{StartedAt: time.Now().UTC(), Machine: machine()}
	for _, sys := range cfg.systems {
		var s system
		var err error
		switch sys {
		case "river":
			s, err = newRiver(ctx, cfg.databaseURL)
		case "asynq":
			s, err = newAsynq(ctx, cfg.redisAddr)
		default:
			log.Fatalf("--systems: unknown system %q (river, asynq)", sys)
		}
		if err != nil {
			log.Fatalf("%s: %v", sys, err)
		}
		results, err := runAll(ctx, s, sys, cfg)
		if cerr := s.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = cerr
		}
		if err != nil {
			log.Fatalf("%s: %v", sys, err)
		}
		rep.Results = append(rep.Results, results...)
	}
	printTable(os.Stdout, rep.Results)
	if jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// system is one peer under test.
type system interface {
	// Drain enqueues n tasks that sleep for sleep (0: none) while no worker
	// runs, then starts workers handlers and returns the throughput from the
	// first handler's start to the last one's return.
	Drain(ctx context.Context, n, workers int, sleep time.Duration) (float64, error)
	// Preload enqueues n tasks as fast as one client can, and returns tasks/s.
	Preload(ctx context.Context, n int) (float64, error)
	// Latency enqueues n tasks one by one at rate per second to workers idle
	// handlers and returns each task's enqueue → handler start.
	Latency(ctx context.Context, n, workers int, rate float64) ([]time.Duration, error)
	// RoundTrips enqueues n tasks one after another and returns each call's time.
	RoundTrips(ctx context.Context, n int) ([]time.Duration, error)
	Close(ctx context.Context) error
}

func runAll(ctx context.Context, s system, name string, cfg config) ([]Result, error) {
	var out []Result
	has := func(w string) bool { return slices.Contains(cfg.workloads, w) }
	type acc struct {
		res  Result
		rate []float64
		lat  [][]time.Duration
	}
	var accs []*acc
	add := func(r Result) *acc {
		a := &acc{res: r}
		accs = append(accs, a)
		return a
	}
	var e1 []*acc
	for _, w := range cfg.workers {
		if has("e1") {
			e1 = append(e1, add(Result{System: name, Workload: "e1", Workers: w, Tasks: cfg.tasks}))
		}
	}
	var preload, e2, lat, rt *acc
	if has("e1-preload") {
		preload = add(Result{System: name, Workload: "e1-preload", Tasks: cfg.tasks})
	}
	if has("e2") {
		e2 = add(Result{System: name, Workload: "e2", Workers: 16, Tasks: cfg.sleepTasks})
	}
	if has("latency") {
		lat = add(Result{System: name, Workload: "latency", Workers: 16, Tasks: cfg.latTasks})
	}
	if has("enqueue") {
		rt = add(Result{System: name, Workload: "enqueue", Tasks: cfg.rtTasks})
	}
	// Run by run, so that noise spreads over every workload.
	for run := 1; run <= cfg.runs; run++ {
		for _, a := range e1 {
			v, err := s.Drain(ctx, cfg.tasks, a.res.Workers, 0)
			if err != nil {
				return nil, fmt.Errorf("e1 %d workers: %w", a.res.Workers, err)
			}
			a.rate = append(a.rate, v)
			fmt.Fprintf(os.Stderr, "%s run %d: e1 %d workers %.0f tasks/s\n", name, run, a.res.Workers, v)
		}
		if preload != nil {
			v, err := s.Preload(ctx, cfg.tasks)
			if err != nil {
				return nil, fmt.Errorf("preload: %w", err)
			}
			preload.rate = append(preload.rate, v)
		}
		if e2 != nil {
			v, err := s.Drain(ctx, cfg.sleepTasks, 16, 50*time.Millisecond)
			if err != nil {
				return nil, fmt.Errorf("e2: %w", err)
			}
			e2.rate = append(e2.rate, v)
		}
		if lat != nil {
			d, err := s.Latency(ctx, lat.res.Tasks, lat.res.Workers, 100)
			if err != nil {
				return nil, fmt.Errorf("latency: %w", err)
			}
			lat.lat = append(lat.lat, d)
		}
		if rt != nil {
			d, err := s.RoundTrips(ctx, rt.res.Tasks)
			if err != nil {
				return nil, fmt.Errorf("enqueue: %w", err)
			}
			rt.lat = append(rt.lat, d)
		}
	}
	for _, a := range accs {
		a.res.Runs = cfg.runs
		if len(a.rate) > 0 {
			a.res.PerSec = median(a.rate)
		}
		if len(a.lat) > 0 {
			var p50, p95, p99 []float64
			for _, d := range a.lat {
				p50 = append(p50, ms(percentile(d, 50)))
				p95 = append(p95, ms(percentile(d, 95)))
				p99 = append(p99, ms(percentile(d, 99)))
			}
			a.res.P50Ms, a.res.P95Ms, a.res.P99Ms = median(p50), median(p95), median(p99)
		}
		out = append(out, a.res)
	}
	return out, nil
}

func printTable(f *os.File, rs []Result) {
	fmt.Fprintf(f, "%-6s %-11s %7s %7s %10s %8s %8s %8s\n", "system", "workload", "workers", "tasks", "tasks/s", "p50 ms", "p95 ms", "p99 ms")
	for _, r := range rs {
		fmt.Fprintf(f, "%-6s %-11s %7d %7d %10.0f %8.2f %8.2f %8.2f\n", r.System, r.Workload, r.Workers, r.Tasks, r.PerSec, r.P50Ms, r.P95Ms, r.P99Ms)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// machine describes the box: CPUs and the load when the run started.
func machine() string {
	load, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("%d CPUs, load %s", runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
}
