package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/internal/localpg"
	"github.com/taskforge/taskforge/server"
	"github.com/taskforge/taskforge/storage"
)

// devOptions configure `taskforge dev`.
type devOptions struct {
	listen   string
	dataDir  string
	fresh    bool
	demo     bool
	logLevel string
}

func devCommand() *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run TaskForge locally: embedded PostgreSQL and Redis, a demo queue, worker and task trickle",
		Long: `dev starts everything a newcomer needs on one machine, with nothing to install
but the PostgreSQL server binaries:

  - PostgreSQL from the local binaries, its data kept in --data-dir between runs
    (unless DATABASE_URL is set);
  - an embedded Redis (miniredis) inside this process (unless REDIS_URL is set);
  - a TaskForge replica on --listen, a "demo" queue, a demo worker and a trickle of
    demo tasks (some failing, some delayed).

Ctrl-C stops everything, PostgreSQL included.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDev(cmd.Context(), o) },
	}
	cmd.Flags().StringVar(&o.listen, "listen", envOr("TASKFORGE_LISTEN", "127.0.0.1:8080"), "HTTP listen address")
	cmd.Flags().StringVar(&o.dataDir, "data-dir", ".taskforge", "where the embedded PostgreSQL keeps its data")
	cmd.Flags().BoolVar(&o.fresh, "fresh", false, "delete the embedded PostgreSQL's data and start clean")
	cmd.Flags().BoolVar(&o.demo, "demo", true, "create the demo queues, run the demo worker and enqueue demo tasks")
	cmd.Flags().StringVar(&o.logLevel, "log-level", "warn", "log level: debug, info (one line per task transition), warn, error")
	return cmd
}

func runDev(ctx context.Context, o devOptions) error {
	log, err := newLogger("text", o.logLevel)
	if err != nil {
		return exitError{2, err}
	}
	cfg := server.Config{DatabaseURL: os.Getenv("DATABASE_URL"), RedisURL: os.Getenv("REDIS_URL"), Listen: o.listen}

	if cfg.DatabaseURL == "" {
		pg, url, err := startDevPostgres(ctx, o)
		if err != nil {
			return err
		}
		defer func() {
			log.Info("stopping embedded PostgreSQL")
			if err := pg.Stop(); err != nil {
				log.Warn("embedded PostgreSQL did not stop cleanly", "err", err)
			}
		}()
		cfg.DatabaseURL = url
		log.Info("embedded PostgreSQL running", "data_dir", pg.DataDir(), "url", url)
	}
	if cfg.RedisURL == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			return fmt.Errorf("start embedded Redis: %w", err)
		}
		defer mr.Close()
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer rdb.Close()
		cfg.Redis = rdb
		log.Info("embedded Redis (miniredis) running", "addr", mr.Addr())
	}

	srv, err := server.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	base := "http://" + ln.Addr().String()
	if o.demo {
		go runDemo(ctx, base, log.With("component", "demo"))
	}
	fmt.Fprintf(os.Stderr, "\n  TaskForge is running.\n    API:       %s\n    Dashboard: %s/admin\n    Metrics:   %s/metrics\n  Press Ctrl-C to stop.\n\n", base, base, base)
	return srv.Serve(ctx, ln)
}

// startDevPostgres starts (or resumes) the project-local PostgreSQL and makes sure
// the taskforge database exists.
func startDevPostgres(ctx context.Context, o devOptions) (*localpg.Server, string, error) {
	if _, err := localpg.FindBinaries(); err != nil {
		return nil, "", fmt.Errorf("taskforge dev needs the PostgreSQL server binaries, or DATABASE_URL: %w", err)
	}
	dir, err := filepath.Abs(filepath.Join(o.dataDir, "pg"))
	if err != nil {
		return nil, "", err
	}
	if o.fresh {
		if err := os.RemoveAll(dir); err != nil {
			return nil, "", fmt.Errorf("--fresh: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, "", err
	}
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	pg, err := localpg.Start(startCtx, localpg.Options{DataDir: dir})
	if err != nil {
		return nil, "", fmt.Errorf("start embedded PostgreSQL: %w", err)
	}
	if err := storage.CreateDatabase(startCtx, pg.URL("postgres"), "taskforge"); err != nil {
		_ = pg.Stop()
		return nil, "", fmt.Errorf("embedded PostgreSQL: %w", err)
	}
	return pg, pg.URL("taskforge"), nil
}
