package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/taskforge/taskforge/internal/backfill"
	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/server"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// serverFlags binds every server setting to a flag whose default comes from its
// environment variable, so each setting is both.
type serverFlags struct {
	cfg       server.Config
	logFormat string
	logLevel  string
	envErrs   []error // environment values that did not parse
	// encryptionKeysFile, when set, holds the encryption keys (read at start).
	encryptionKeysFile string
	insecure           bool // serve without tokens on a non-loopback address (serve_auth.go)
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// fromEnv returns $env parsed, def when it is unset, and notes a value that does
// not parse (serve then exits 2 rather than run on a zero value).
func fromEnv[T any](f *serverFlags, env string, def T, parse func(string) (T, error)) T {
	v, ok := os.LookupEnv(env)
	if !ok {
		return def
	}
	parsed, err := parse(v)
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("$%s: %w", env, err))
	}
	return parsed
}

// durationVar registers a duration flag defaulting to $env (or def).
func (f *serverFlags) durationVar(fs *pflag.FlagSet, p *time.Duration, flag, env string, def time.Duration, usage string) {
	fs.DurationVar(p, flag, fromEnv(f, env, def, time.ParseDuration), usage+" ($"+env+")")
}

// boolVar registers a bool flag defaulting to $env (or false).
func (f *serverFlags) boolVar(fs *pflag.FlagSet, p *bool, flag, env, usage string) {
	fs.BoolVar(p, flag, fromEnv(f, env, false, strconv.ParseBool), usage+" ($"+env+")")
}

func (f *serverFlags) register(fs *pflag.FlagSet) {
	c := &f.cfg
	fs.StringVar(&c.DatabaseURL, "database-url", envOr("DATABASE_URL", ""), "PostgreSQL URL ($DATABASE_URL)")
	fs.StringVar(&c.ListenDatabaseURL, "listen-database-url", envOr("TASKFORGE_LISTEN_DATABASE_URL", ""),
		"direct PostgreSQL URL for the dispatcher's LISTEN when the database URL goes through PgBouncer in transaction mode, or \"off\" to poll on the dispatch tick ($TASKFORGE_LISTEN_DATABASE_URL)")
	fs.StringVar(&c.RedisURL, "redis-url", envOr("REDIS_URL", ""), "Redis URL ($REDIS_URL)")
	f.boolVar(fs, &c.RedisCluster, "redis-cluster", "TASKFORGE_REDIS_CLUSTER",
		"the Redis URL names Redis Cluster seed nodes: redis://host:port?addr=host2:port&addr=host3:port")
	fs.StringVar(&c.Listen, "listen", envOr("TASKFORGE_LISTEN", ":8080"), "HTTP listen address ($TASKFORGE_LISTEN)")
	f.durationVar(fs, &c.LeaseTimeout, "lease-timeout", "TASKFORGE_LEASE_TIMEOUT", 30*time.Second, "lease granted by a poll or heartbeat")
	f.durationVar(fs, &c.HeartbeatInterval, "heartbeat-interval", "TASKFORGE_HEARTBEAT_INTERVAL", 10*time.Second, "heartbeat interval advertised to workers")
	f.durationVar(fs, &c.WatchdogInterval, "watchdog-interval", "TASKFORGE_WATCHDOG_INTERVAL", 15*time.Second, "longest pause between watchdog sweeps")
	f.durationVar(fs, &c.DispatchInterval, "dispatch-interval", "TASKFORGE_DISPATCH_INTERVAL", time.Second, "dispatcher tick")
	f.durationVar(fs, &c.BackoffBase, "backoff-base", "TASKFORGE_BACKOFF_BASE", time.Second, "default retry backoff base of new queues")
	f.durationVar(fs, &c.BackoffMax, "backoff-max", "TASKFORGE_BACKOFF_MAX", time.Hour, "default retry backoff cap of new queues")
	f.durationVar(fs, &c.CommitTimeout, "commit-timeout", "TASKFORGE_COMMIT_TIMEOUT", 5*time.Second,
		"bound of one group commit of acks or claims; its requests get 503 when it passes")
	f.durationVar(fs, &c.ShutdownTimeout, "shutdown-timeout", "TASKFORGE_SHUTDOWN_TIMEOUT", 10*time.Second,
		"first phase of a stop: waiting long polls are answered, requests in flight finish or are cut off after it (keep it above 5s)")
	f.durationVar(fs, &c.FeedStopTimeout, "feed-stop-timeout", "TASKFORGE_FEED_STOP_TIMEOUT", 10*time.Second,
		"second phase of a stop: the dispatcher, scheduler and pushers end; push requests in flight get four fifths of it")
	f.durationVar(fs, &c.RestStopTimeout, "rest-stop-timeout", "TASKFORGE_REST_STOP_TIMEOUT", 5*time.Second,
		"last phase of a stop: the watchdog, janitor, telemetry and live feeds end")
	maxPayload, err := strconv.ParseInt(envOr("TASKFORGE_MAX_PAYLOAD_BYTES", "1048576"), 10, 64)
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("$TASKFORGE_MAX_PAYLOAD_BYTES: %w", err))
	}
	fs.Int64Var(&c.MaxPayloadBytes, "max-payload-bytes", maxPayload, "largest task payload or result ($TASKFORGE_MAX_PAYLOAD_BYTES)")
	pushConcurrency, err := strconv.Atoi(envOr("TASKFORGE_PUSH_CONCURRENCY", "64"))
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("$TASKFORGE_PUSH_CONCURRENCY: %w", err))
	}
	fs.IntVar(&c.Push.Concurrency, "push-concurrency", pushConcurrency, "push requests in flight on this replica, over all push queues ($TASKFORGE_PUSH_CONCURRENCY)")
	bulkDuty, err := strconv.ParseFloat(envOr("TASKFORGE_BULK_DUTY", "0.5"), 64)
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("$TASKFORGE_BULK_DUTY: %w", err))
	}
	fs.Float64Var(&c.BulkDuty, "bulk-duty", bulkDuty, "share of its time a bulk cancel or discard spends writing batches, above 0 and at most 1; it rests the remainder ($TASKFORGE_BULK_DUTY)")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", envOr("TASKFORGE_REDIS_PREFIX", "taskforge"), "prefix of every Redis key ($TASKFORGE_REDIS_PREFIX)")
	fs.BoolVar(&c.NoMigrate, "no-migrate", false, "do not apply pending migrations at start")
	f.durationVar(fs, &c.Retention, "retention", "TASKFORGE_RETENTION", 7*24*time.Hour, "how long done and cancelled tasks are kept")
	f.durationVar(fs, &c.RetentionInterval, "retention-interval", "TASKFORGE_RETENTION_INTERVAL", time.Minute, "pause between retention sweeps")
	f.durationVar(fs, &c.AuditRetention, "audit-retention", "TASKFORGE_AUDIT_RETENTION", 90*24*time.Hour, "how long audit log entries are kept")
	fs.StringVar(&c.TLSCertFile, "tls-cert", envOr("TASKFORGE_TLS_CERT", ""), "PEM certificate file: serve HTTPS ($TASKFORGE_TLS_CERT)")
	fs.StringVar(&c.TLSKeyFile, "tls-key", envOr("TASKFORGE_TLS_KEY", ""), "PEM private key file for --tls-cert ($TASKFORGE_TLS_KEY)")
	fs.StringVar(&f.encryptionKeysFile, "encryption-keys-file", envOr("TASKFORGE_ENCRYPTION_KEYS_FILE", ""),
		"file of id=base64 AES-256 keys, one per line, the first sealing: encrypt payloads, results and error texts at rest ($TASKFORGE_ENCRYPTION_KEYS_FILE; or the keys themselves in $TASKFORGE_ENCRYPTION_KEYS)")
	c.EncryptionKeys = os.Getenv("TASKFORGE_ENCRYPTION_KEYS")
	var trusted []string
	if v := envOr("TASKFORGE_TRUSTED_ORIGINS", ""); v != "" {
		trusted = strings.Split(v, ",")
	}
	fs.StringSliceVar(&c.TrustedOrigins, "trusted-origin", trusted,
		"origin allowed to make state-changing browser requests from elsewhere, e.g. a proxy's https://ops.example.com ($TASKFORGE_TRUSTED_ORIGINS, comma-separated)")
	fs.StringVar(&f.logFormat, "log-format", envOr("TASKFORGE_LOG_FORMAT", "json"), "log format: json or text ($TASKFORGE_LOG_FORMAT)")
	fs.StringVar(&f.logLevel, "log-level", envOr("TASKFORGE_LOG_LEVEL", "info"), "log level: debug, info, warn, error ($TASKFORGE_LOG_LEVEL)")
	f.registerAuth(fs)
}

func serveCommand() *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a TaskForge replica: API, dispatcher and watchdog",
		Long: `Run a TaskForge replica: the HTTP API, the dispatcher, the watchdog and the
retention janitor. A flag whose help names an environment variable takes its
default from that variable. Spans are exported over OTLP/HTTP when
$OTEL_EXPORTER_OTLP_ENDPOINT is set (with the other standard OTEL_* variables).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := errors.Join(f.envErrs...); err != nil {
				return exitError{2, err}
			}
			applyServeGC(os.Getenv)
			if err := f.loadEncryptionKeys(); err != nil {
				return exitError{2, err}
			}
			log, err := newLogger(f.logFormat, f.logLevel)
			if err != nil {
				return exitError{2, err}
			}
			tp, shutdownTracing, err := telemetry.TracerFromEnv(cmd.Context())
			if err != nil {
				return err
			}
			defer func() { _ = shutdownTracing(context.Background()) }()
			f.cfg.TracerProvider = tp
			srv, err := server.New(cmd.Context(), f.cfg, log)
			if err != nil {
				return err
			}
			defer srv.Close()
			if err := checkExposure(cmd.Context(), srv, f.cfg.Listen, f.insecure, log); err != nil {
				return exitError{2, err}
			}
			return srv.ListenAndServe(cmd.Context())
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func migrateCommand() *cobra.Command {
	var databaseURL string
	var moveHistory bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending database migrations and exit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if databaseURL == "" {
				return exitError{2, errors.New("--database-url or $DATABASE_URL is required")}
			}
			pool, err := storage.Connect(cmd.Context(), databaseURL, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			applied, err := migrations.Apply(cmd.Context(), pool)
			if err != nil {
				return err
			}
			cmd.Printf("applied %d migration(s) %v\n", len(applied), applied)
			if !moveHistory {
				return nil
			}
			return backfillHistory(cmd.Context(), storage.New(pool), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&databaseURL, "database-url", envOr("DATABASE_URL", ""), "PostgreSQL URL ($DATABASE_URL)")
	cmd.Flags().BoolVar(&moveHistory, "move-history", true,
		"after the migrations, move the finished tasks that a release before history left in tasks into history "+
			"(in batches, resumable; serve also does it in the background)")
	return cmd
}

// loadEncryptionKeys reads --encryption-keys-file into the config, when given.
func (f *serverFlags) loadEncryptionKeys() error {
	if f.encryptionKeysFile == "" {
		return nil
	}
	b, err := os.ReadFile(f.encryptionKeysFile)
	if err != nil {
		return fmt.Errorf("encryption keys: %w", err)
	}
	f.cfg.EncryptionKeys = string(b)
	return nil
}

// backfillHistory moves every finished task left in tasks by a release before
// history into history, batch after batch, with a progress line on w every few
// seconds. Stopped (Ctrl-C), it can run again: it takes what is left.
func backfillHistory(ctx context.Context, store *storage.Store, w io.Writer) error {
	var last time.Time
	mover := backfill.New(store, backfill.Config{OnBatch: func(p backfill.Progress) {
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			fmt.Fprintln(w, p)
		}
	}}, slog.New(slog.NewTextHandler(w, nil)))
	p, err := mover.MoveAll(ctx)
	if p.Total > 0 {
		fmt.Fprintln(w, p)
	}
	if len(p.IndexesDropped) > 0 {
		fmt.Fprintf(w, "history: no finished task left in tasks: dropped %s\n", strings.Join(p.IndexesDropped, ", "))
	}
	if err != nil {
		return fmt.Errorf("move finished tasks into history (run migrate again to resume; serve also moves them): %w", err)
	}
	return nil
}
