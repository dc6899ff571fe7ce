package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
)

// builtinHandlers are the reference worker's handlers, by name.
var builtinHandlers = map[string]client.HandlerFunc{
	// noop acks at once.
	"noop": func(context.Context, *client.Job) error { return nil },
	// sleep waits {"ms": N} milliseconds, then acks; it stops early when its
	// context ends.
	"sleep": func(ctx context.Context, job *client.Job) error {
		var p struct {
			MS int64 `json:"ms"`
		}
		if err := decodeOptional(job, &p); err != nil {
			return err
		}
		if p.MS < 0 {
			return client.Permanent(fmt.Errorf("sleep: ms must not be negative, got %d", p.MS))
		}
		t := time.NewTimer(time.Duration(p.MS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("sleep of %dms interrupted: %w", p.MS, context.Cause(ctx))
		}
	},
	// fail fails the first {"fail_times": N} attempts, then acks.
	"fail": func(_ context.Context, job *client.Job) error {
		var p struct {
			FailTimes int `json:"fail_times"`
		}
		if err := decodeOptional(job, &p); err != nil {
			return err
		}
		if job.Attempt <= p.FailTimes {
			return fmt.Errorf("planned failure %d of %d", job.Attempt, p.FailTimes)
		}
		return nil
	},
	// snooze snoozes the first {"snooze_times": N} attempts for {"ms": M}
	// milliseconds (default 1000) without spending a retry, then acks.
	"snooze": func(_ context.Context, job *client.Job) error {
		p := struct {
			SnoozeTimes int   `json:"snooze_times"`
			MS          int64 `json:"ms"`
		}{MS: 1000}
		if err := decodeOptional(job, &p); err != nil {
			return err
		}
		if p.MS < 0 {
			return client.Permanent(fmt.Errorf("snooze: ms must not be negative, got %d", p.MS))
		}
		if job.Attempt <= p.SnoozeTimes {
			return client.Snooze(time.Duration(p.MS) * time.Millisecond)
		}
		return nil
	},
	// echo acks with the payload as the result.
	"echo": func(_ context.Context, job *client.Job) error { return job.SetResult(job.Payload) },
}

// decodeOptional decodes the payload into v; an absent or null payload leaves v zero.
func decodeOptional(job *client.Job, v any) error {
	if len(job.Payload) == 0 || string(job.Payload) == "null" {
		return nil
	}
	return job.Decode(v)
}

func handlerNames() string {
	names := make([]string, 0, len(builtinHandlers))
	for n := range builtinHandlers {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// workerCommand is `taskforge worker`: a reference worker on the SDK, with the
// built-in handlers, for demos, benchmarks and chaos tests.
func workerCommand() *cobra.Command {
	var (
		server   string
		token    string
		queues   []string
		cfg      client.WorkerConfig
		logLevel string
		runFor   time.Duration
		protocol string
	)
	cmd := &cobra.Command{
		Use:   "worker --queue NAME=HANDLER...",
		Short: "Run a reference worker with built-in handlers (" + handlerNames() + ")",
		Long: `Run a worker that serves each --queue NAME=HANDLER with a built-in handler:

  noop   acks at once
  sleep  sleeps {"ms": N} milliseconds, then acks
  fail   fails the first {"fail_times": N} attempts, then acks
  echo   acks with the payload as the result
  snooze snoozes the first {"snooze_times": N} attempts for {"ms": M}
         milliseconds (default 1000) without spending a retry, then acks

Queues are polled in the order given. On SIGTERM or SIGINT the worker stops
polling, waits up to --grace for running tasks, then releases the rest
(POST /workers/release) so another worker takes them at once, without spending
their retry budget, and exits 0.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(queues) == 0 {
				return usagef("give at least one --queue NAME=HANDLER (handlers: %s)", handlerNames())
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return usagef("--log-level %q: %v", logLevel, err)
			}
			if cfg.ShutdownGrace == 0 {
				cfg.ShutdownGrace = -1 // no grace: hand running tasks back at once
			}
			if cfg.Concurrency < 1 {
				return usagef("--concurrency must be at least 1")
			}
			switch {
			case !cmd.Flags().Changed("prefetch"):
				cfg.Prefetch = 0 // the SDK's default: --concurrency, at most 100
			case cfg.Prefetch < 0 || cfg.Prefetch > 100:
				return usagef("--prefetch must be from 0 to 100")
			case cfg.Prefetch == 0:
				cfg.Prefetch = -1 // the SDK's "none"
			}
			if cfg.PrefetchBelow <= 0 {
				return usagef("--prefetch-below must be positive")
			}
			type binding struct {
				queue string
				h     client.HandlerFunc
			}
			var bindings []binding
			for _, spec := range queues {
				name, handler, ok := strings.Cut(spec, "=")
				h := builtinHandlers[handler]
				if !ok || name == "" || h == nil {
					return usagef("--queue %q: want NAME=HANDLER with a handler among %s", spec, handlerNames())
				}
				bindings = append(bindings, binding{name, h})
			}
			if protocol != protocolSDK && protocol != protocolPlain && protocol != protocolBatched {
				return usagef("--protocol %q: want sdk, plain or batched", protocol)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
			opts := []client.Option{client.WithToken(token)}
			var stats *requestStats
			var started atomic.Int64
			if os.Getenv(envWorkerStats) != "" {
				t := http.DefaultTransport.(*http.Transport).Clone()
				t.MaxIdleConnsPerHost = 64 // as the client's own default
				stats = newRequestStats(t)
				opts = append(opts, client.WithHTTPClient(&http.Client{Transport: stats}))
				cfg.OnEvent = func(ev client.WorkerEvent) {
					if ev.Kind == client.EventStarted {
						started.Add(1)
					}
				}
				defer func() { stats.log(log, started.Load()) }()
			}
			stopProfile, err := startCPUProfile(log)
			if err != nil {
				return usageError(err)
			}
			defer stopProfile()
			c, err := client.New(server, opts...)
			if err != nil {
				return usageError(err)
			}
			cfg.Logger = log
			if err := cfg.Validate(); err != nil {
				return usageError(err)
			}
			ctx := cmd.Context()
			if runFor > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, runFor)
				defer cancel()
			}
			if protocol != protocolSDK {
				pw := &plainWorker{c: c, id: cfg.ID, concurrency: cfg.Concurrency, pollWait: cfg.PollWait,
					batched: protocol == protocolBatched, handlers: map[string]client.HandlerFunc{}, log: log}
				if pw.id == "" {
					pw.id = client.NewWorker(c, cfg).ID()
				}
				for _, b := range bindings {
					pw.queues = append(pw.queues, b.queue)
					pw.handlers[b.queue] = b.h
				}
				log.Info("worker started", "worker_id", pw.id, "server", c.URL(), "queues", queues,
					"concurrency", cfg.Concurrency, "protocol", protocol)
				if err := pw.run(ctx); err != nil {
					return withExitCode(err)
				}
				log.Info("worker stopped", "worker_id", pw.id)
				return nil
			}
			w := client.NewWorker(c, cfg)
			for _, b := range bindings {
				w.Handle(b.queue, b.h)
			}
			log.Info("worker started", "worker_id", w.ID(), "server", c.URL(), "queues", queues,
				"concurrency", cfg.Concurrency, "prefetch", max(cmp.Or(cfg.Prefetch, min(cfg.Concurrency, 100)), 0), "grace", cfg.ShutdownGrace)
			if err := w.Run(ctx); err != nil {
				return withExitCode(err)
			}
			log.Info("worker stopped", "worker_id", w.ID())
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&server, "server", defaultServer(), "TaskForge server URL ($TASKFORGE_URL)")
	fs.StringVar(&token, "token", envOr("TASKFORGE_TOKEN", ""), "API token with the worker role ($TASKFORGE_TOKEN)")
	fs.StringArrayVarP(&queues, "queue", "q", nil, "NAME=HANDLER; repeat for more queues ("+handlerNames()+")")
	fs.IntVarP(&cfg.Concurrency, "concurrency", "c", 10, "tasks run at once")
	fs.IntVar(&cfg.Prefetch, "prefetch", 0, "tasks claimed ahead of a free slot while handlers run under --prefetch-below on average (0: none; unset: --concurrency, at most 100, adapting up to 200 with the slots while handlers outrun polls)")
	fs.DurationVar(&cfg.PrefetchBelow, "prefetch-below", client.DefaultPrefetchBelow, "average handler duration under which the worker prefetches")
	fs.StringVar(&cfg.ID, "worker-id", "", "worker id (default <hostname>-<pid>-<random>)")
	fs.DurationVar(&cfg.ShutdownGrace, "grace", 10*time.Second, "on SIGTERM, how long running tasks may finish before they are handed back")
	fs.DurationVar(&cfg.PollWait, "poll-wait", 10*time.Second, "long-poll wait (at most 30s)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.DurationVar(&runFor, "run-for", 0, "stop gracefully after this long (0: until signalled)")
	fs.StringVar(&protocol, "protocol", protocolSDK, "sdk (the Go SDK's runtime), plain (each of --concurrency loops polls one task and acks it alone) or batched (one loop polls up to --concurrency tasks and acks them in one batch); plain and batched do not heartbeat, prefetch or ride acks on polls")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	return cmd
}
