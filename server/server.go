// Package server wires one TaskForge replica together: the PostgreSQL pool and
// migrations, the Redis buffer, the task lifecycle, the HTTP API, the dispatcher,
// the watchdog, the pushers and the scheduler, and runs them until its context
// ends. It owns every goroutine the replica starts, and stops them in order:
// intake first (the HTTP drain), then the loops that feed work, then the rest.
// It owns no queue logic.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskforge/taskforge/api"
	"github.com/taskforge/taskforge/audit"
	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/dashboard"
	"github.com/taskforge/taskforge/dispatcher"
	"github.com/taskforge/taskforge/internal/backfill"
	"github.com/taskforge/taskforge/internal/janitor"
	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/internal/push"
	"github.com/taskforge/taskforge/internal/tally"
	"github.com/taskforge/taskforge/internal/testsignal"
	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/scheduler"
	"github.com/taskforge/taskforge/sealer"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
	"github.com/taskforge/taskforge/watchdog"
)

// Config is everything a replica needs. Zero durations and sizes take the defaults
// that `taskforge serve` documents (README, Configuration).
type Config struct {
	DatabaseURL string // required
	// ListenDatabaseURL is where the dispatcher's LISTEN connection goes. Empty
	// means DatabaseURL. Set it when DatabaseURL reaches PostgreSQL through a
	// transaction pooler such as PgBouncer: a URL that reaches PostgreSQL directly,
	// or ListenOff to poll on the dispatch tick alone. Either way DatabaseURL is then
	// used without named prepared statements (storage.BehindTransactionPooler).
	ListenDatabaseURL string
	RedisURL          string // required unless Redis is given
	Listen            string // defaults to ":8080"
	// RedisCluster makes RedisURL name the seed nodes of a Redis Cluster
	// (redis://host:port?addr=host2:port&addr=host3:port) rather than one server.
	RedisCluster bool
	// Redis, when set, is used instead of dialling RedisURL (the embedded dev mode).
	Redis redis.UniversalClient

	LeaseTimeout      time.Duration // defaults to 30s
	HeartbeatInterval time.Duration // defaults to 10s
	WatchdogInterval  time.Duration // defaults to 15s
	DispatchInterval  time.Duration // defaults to 1s
	BackoffBase       time.Duration // defaults to 1s
	BackoffMax        time.Duration // defaults to 1h
	MaxPayloadBytes   int64         // defaults to 1 MiB
	RedisPrefix       string        // defaults to "taskforge"
	NoMigrate         bool          // skip applying migrations at start
	// CommitTimeout bounds each try of the group commit of acks and claims; its
	// callers get 503 when it passes. Defaults to 5s.
	CommitTimeout time.Duration
	// CommitMaxWaiting bounds the requests that acks (single, batch, or carried by a
	// poll), and apart from them the polls, waiting for a group commit; beyond it
	// requests get 503 at once. Defaults to 2,000.
	CommitMaxWaiting int
	// ShutdownTimeout bounds the first phase of a stop, the HTTP drain: waiting
	// long polls are answered at once, in-flight requests finish, and those still
	// running after it are cut off. Defaults to 10s. Keep it above 5s: net/http
	// waits up to 5s for a connection that was opened but has not sent a
	// request yet, as a client's connection pool leaves behind.
	ShutdownTimeout time.Duration
	// FeedStopTimeout bounds the second phase of a stop: the loops that feed work
	// (dispatcher, scheduler, pushers) end; the pushers' requests in flight get
	// four fifths of it to answer. Defaults to 10s.
	FeedStopTimeout time.Duration
	// RestStopTimeout bounds the last phase of a stop: the watchdog, the janitor,
	// the telemetry folder, the settings refresher, the pub/sub listeners and the
	// dashboard's live feed end. Defaults to 5s.
	RestStopTimeout time.Duration
	// BulkDuty is the share of its time a bulk cancel or discard spends writing
	// batches, in (0, 1]; it rests the remainder so that other queues' commits are
	// not stuck behind its WAL. Zero means storage.DefaultBulkDuty.
	BulkDuty float64
	// DBMaxConns sizes each of the replica's two PostgreSQL pools: the hot-path
	// pool (enqueues, claims, acks of tasks outside a workflow, heartbeats; see
	// storage.WithHotPool) and the pool of everything else. Behind a transaction
	// pooler there is one pool. Defaults to pgx's default (max(4, CPUs)).
	DBMaxConns int32
	// TracerProvider receives spans; nil means none (see telemetry.TracerFromEnv).
	TracerProvider trace.TracerProvider
	// TrustedOrigins may make state-changing browser requests from another origin.
	TrustedOrigins []string
	// Retention is how long done and cancelled tasks are kept. Defaults to 7 days.
	Retention time.Duration
	// RetentionInterval is the pause between janitor sweeps. Defaults to 1 minute.
	RetentionInterval time.Duration
	// AuditRetention is how long audit log entries are kept. Defaults to 90 days.
	AuditRetention time.Duration
	// TLSCertFile and TLSKeyFile, when both set, make the API serve HTTPS.
	TLSCertFile, TLSKeyFile string
	// EncryptionKeys, when set ("id=base64,id2=base64"; the first seals), encrypts
	// payloads, results and error texts at rest with AES-256-GCM (see package sealer).
	EncryptionKeys string
	// Push tunes the pushers of push queues (package push): Push.Concurrency is
	// `--push-concurrency` (default 64); MaxPayloadBytes, StopGrace (the
	// ShutdownTimeout) and Telemetry come from this Config.
	Push push.Config
	// Auth tunes API-token authentication and the abuse limits (package auth); it
	// is on while an unrevoked token exists.
	Auth auth.Config
	// TestSignals, when set, hears of every step of the replica's background loops
	// (tests wait on them instead of sleeping); nil in production.
	TestSignals *TestSignals
	// Clock, when set, is the time the replica's lease and due-time statements run
	// at instead of the database's now() (storage.WithClock), so that a test moves
	// leases to their expiry instead of waiting for it; nil in production.
	Clock func() time.Time
}

// TestSignals carry what a replica's background loops did to a test (package
// testsignal). Each is inert until the test calls Init, which it must do before New.
type TestSignals struct {
	DispatchPass  testsignal.Signal[dispatcher.Pass] // every pass of the dispatcher
	WatchdogSweep testsignal.Signal[watchdog.Sweep]  // every sweep of the watchdog
	JanitorSweep  testsignal.Signal[janitor.Sweep]   // every retention sweep
	PushAnswer    testsignal.Signal[push.Answer]     // every push answer recorded
}

// Init makes every signal record.
func (ts *TestSignals) Init() {
	ts.DispatchPass.Init()
	ts.WatchdogSweep.Init()
	ts.JanitorSweep.Init()
	ts.PushAnswer.Init()
}

// ListenOff is the ListenDatabaseURL that turns LISTEN off: the dispatcher then
// finds newly enqueued work on its tick (DispatchInterval); retries and scheduled
// tasks still go out when they fall due.
const ListenOff = "off"

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Listen = cmp.Or(c.Listen, ":8080")
	c.LeaseTimeout = cmp.Or(c.LeaseTimeout, 30*time.Second)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, 10*time.Second)
	c.WatchdogInterval = cmp.Or(c.WatchdogInterval, 15*time.Second)
	c.DispatchInterval = cmp.Or(c.DispatchInterval, time.Second)
	c.BackoffBase = cmp.Or(c.BackoffBase, time.Second)
	c.BackoffMax = cmp.Or(c.BackoffMax, time.Hour)
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, 1<<20)
	c.RedisPrefix = cmp.Or(c.RedisPrefix, "taskforge")
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 10*time.Second)
	c.FeedStopTimeout = cmp.Or(c.FeedStopTimeout, 10*time.Second)
	c.RestStopTimeout = cmp.Or(c.RestStopTimeout, 5*time.Second)
	c.Push.Concurrency = cmp.Or(c.Push.Concurrency, 64)
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.DatabaseURL == "":
		return errors.New("DATABASE_URL is required")
	case c.RedisURL == "" && c.Redis == nil:
		return errors.New("REDIS_URL is required")
	case strings.ContainsAny(c.RedisPrefix, "{}"):
		return errors.New("TASKFORGE_REDIS_PREFIX must not contain '{' or '}' (they delimit Redis Cluster hash tags)")
	case c.HeartbeatInterval >= c.LeaseTimeout:
		return fmt.Errorf("TASKFORGE_HEARTBEAT_INTERVAL (%s) must be shorter than TASKFORGE_LEASE_TIMEOUT (%s)", c.HeartbeatInterval, c.LeaseTimeout)
	case c.BackoffMax < c.BackoffBase:
		return errors.New("TASKFORGE_BACKOFF_MAX must not be below TASKFORGE_BACKOFF_BASE")
	case c.CommitTimeout < 0:
		return errors.New("TASKFORGE_COMMIT_TIMEOUT must not be negative")
	case c.CommitMaxWaiting < 0:
		return errors.New("the group commit's waiting bound must not be negative")
	case c.ShutdownTimeout < 0 || c.FeedStopTimeout < 0 || c.RestStopTimeout < 0:
		return errors.New("the stop timeouts must not be negative")
	case c.Push.Concurrency < 1:
		return errors.New("TASKFORGE_PUSH_CONCURRENCY must be at least 1")
	case c.MaxPayloadBytes < 1:
		return errors.New("TASKFORGE_MAX_PAYLOAD_BYTES must be positive")
	case c.BulkDuty < 0 || c.BulkDuty > 1:
		return fmt.Errorf("TASKFORGE_BULK_DUTY (%g) must be above 0 and at most 1", c.BulkDuty)
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return errors.New("TASKFORGE_TLS_CERT and TASKFORGE_TLS_KEY go together")
	}
	if _, _, err := c.listen(); err != nil {
		return err
	}
	return nil
}

// pooled reports whether DatabaseURL goes through a transaction pooler: the
// operator said so by giving LISTEN a connection of its own, or none.
func (c Config) pooled() bool { return c.ListenDatabaseURL != "" }

// listen returns the dispatcher's LISTEN connection (nil: like the pool's) and
// whether LISTEN is off.
func (c Config) listen() (conn *pgx.ConnConfig, off bool, err error) {
	switch {
	case c.ListenDatabaseURL == "":
		return nil, false, nil
	case strings.EqualFold(c.ListenDatabaseURL, ListenOff):
		return nil, true, nil
	}
	conn, err = pgx.ParseConfig(c.ListenDatabaseURL)
	if err != nil {
		return nil, false, fmt.Errorf("TASKFORGE_LISTEN_DATABASE_URL (a PostgreSQL URL, or %q): %w", ListenOff, err)
	}
	return conn, false, nil
}

// Server is one running replica.
type Server struct {
	cfg        Config
	log        *slog.Logger
	pool       *pgxpool.Pool
	hot        *pgxpool.Pool // nil behind a transaction pooler
	rdb        redis.UniversalClient
	ownsRedis  bool
	API        *api.Server
	Lifecycle  *lifecycle.Lifecycle
	Dispatcher *dispatcher.Dispatcher
	Watchdog   *watchdog.Watchdog
	Scheduler  *scheduler.Scheduler
	Store      *storage.Store
	Buffer     *buffer.Buffer
	Telemetry  *telemetry.Telemetry
	Janitor    *janitor.Janitor
	// Backfill moves into history the finished tasks that a release before
	// history left in tasks (none once every replica runs this release).
	Backfill  *backfill.Mover
	Tally     *tally.Folder
	Auth      *auth.Guard
	Pusher    *push.Pusher
	Dashboard *dashboard.Dashboard
	// Handler is what Serve serves: the API with every route mounted on it. Tests
	// may wrap it before Serve to watch the traffic.
	Handler http.Handler
}

// New connects to PostgreSQL and Redis, applies migrations (unless NoMigrate) and
// builds the components. Close releases the connections.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var connOpts []storage.ConnectOption
	if cfg.pooled() {
		connOpts = append(connOpts, storage.BehindTransactionPooler(cfg.DatabaseURL))
	}
	pool, err := storage.Connect(ctx, cfg.DatabaseURL, cfg.DBMaxConns, connOpts...)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, pool: pool, rdb: cfg.Redis}
	if s.rdb == nil {
		if s.rdb, err = dialRedis(cfg); err != nil {
			pool.Close()
			return nil, err
		}
		s.ownsRedis = true
	}
	if !cfg.NoMigrate {
		applied, err := migrations.Apply(ctx, pool)
		if err != nil {
			s.Close()
			return nil, err
		}
		if len(applied) > 0 {
			log.Info("applied migrations", "versions", applied)
		}
	}
	if s.ownsRedis { // an embedded Redis (dev mode) never evicts
		s.checkEvictionPolicy(ctx)
	}

	storeOpts := []storage.Option{storage.WithBulkDuty(cfg.BulkDuty)}
	if cfg.EncryptionKeys != "" {
		keys, err := sealer.ParseKeys(cfg.EncryptionKeys)
		if err == nil {
			var sl *sealer.Sealer
			if sl, err = sealer.New(keys); err == nil {
				storeOpts = append(storeOpts, storage.WithSealer(sl))
			}
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("TASKFORGE_ENCRYPTION_KEYS: %w", err)
		}
	}
	if !cfg.pooled() {
		// Behind a transaction pooler the hot path's session settings would not
		// hold, so its statements share the one pool and the triggers count.
		if s.hot, err = storage.Connect(ctx, cfg.DatabaseURL, cfg.DBMaxConns, storage.HotPathSettings()); err != nil {
			s.Close()
			return nil, err
		}
		storeOpts = append(storeOpts, storage.WithHotPool(s.hot))
	}
	// A queue's retention leaves out what serve's --retention sets (done and
	// cancelled; dead tasks are kept forever unless the queue says otherwise).
	storeOpts = append(storeOpts, storage.WithRetentionDefaults(storage.DefaultRetention(cmp.Or(cfg.Retention, storage.DefaultDoneRetention))))
	if cfg.Clock != nil {
		storeOpts = append(storeOpts, storage.WithClock(cfg.Clock))
	}
	s.Store = storage.New(pool, storeOpts...)
	s.Buffer = buffer.New(s.rdb, cfg.RedisPrefix)
	s.Telemetry = telemetry.New(log.With("component", "transitions")).WithTracing(cfg.TracerProvider)
	s.Auth = auth.New(s.Store, cfg.Auth, log.With("component", "auth"))
	audits := audit.New(s.Store, log.With("component", "audit"))
	listenConn, noListen, _ := cfg.listen() // checked by Validate
	if noListen {
		log.Info("LISTEN is off: the dispatcher finds newly enqueued work on its tick",
			"dispatch_interval", cfg.DispatchInterval)
	}
	// The dispatcher's wake-ups come first: the lifecycle posts to them, and the
	// dispatcher, built on both, dispatches through the lifecycle.
	wakes := dispatcher.NewWakes()
	// Every task transition, whoever asks for it (API, dispatcher, watchdog,
	// scheduler, pushers), with the dispatcher told of the work it leaves.
	s.Lifecycle = lifecycle.New(s.Store, s.Buffer, wakes, lifecycle.Config{LeaseTimeout: cfg.LeaseTimeout,
		CommitTimeout: cfg.CommitTimeout, CommitMaxWaiting: cfg.CommitMaxWaiting, LowWater: dispatcher.LowWater,
		WakeOnEnqueue: noListen, // no NOTIFY reaches the dispatcher: this replica's enqueues wake it
		BufferTarget:  dispatcher.Config{}.WithDefaults().BufferTarget,
		Telemetry:     s.Telemetry}, log.With("component", "lifecycle"))
	s.Telemetry.Registry().MustRegister(telemetry.NewStateCollector(s.Store, s.Buffer, s.Lifecycle.Limits(), 2*time.Second))
	ts := cmp.Or(cfg.TestSignals, &TestSignals{}) // inert unless a test gave its own
	s.Dispatcher = dispatcher.New(s.Store, s.Buffer, s.Lifecycle, wakes, dispatcher.Config{Interval: cfg.DispatchInterval,
		ListenConnConfig: listenConn, NoListen: noListen, OnPass: ts.DispatchPass.Signal},
		log.With("component", "dispatcher"))
	// Fires ticks through the lifecycle, as a manual trigger does.
	s.Scheduler = scheduler.New(s.Store, s.Lifecycle, scheduler.Config{}, log.With("component", "scheduler"))
	s.API, err = api.New(s.Store, s.Buffer, s.Lifecycle, api.Config{
		LeaseTimeout: cfg.LeaseTimeout, HeartbeatInterval: cfg.HeartbeatInterval,
		MaxPayloadBytes: cfg.MaxPayloadBytes, BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax,
		Telemetry: s.Telemetry, TrustedOrigins: cfg.TrustedOrigins, Auth: s.Auth.Middleware(),
		Audit: audits.Middleware(), Scheduler: s.Scheduler, LastSweep: s.lastSweep,
	}, log.With("component", "api"))
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Auth.Mount(s.API.Engine())
	audits.Mount(s.API.Engine())
	s.Dashboard = dashboard.Mount(s.API.Engine(), s.Store, dashboard.Options{StaleAfter: 3 * cfg.HeartbeatInterval}, log.With("component", "dashboard"))
	s.Handler = s.API.Handler()
	s.Watchdog = watchdog.New(s.Store, s.Lifecycle, watchdog.Config{Interval: cfg.WatchdogInterval,
		OnSweep: ts.WatchdogSweep.Signal},
		log.With("component", "watchdog"))
	pushCfg := cfg.Push
	// Aborted requests are recorded after the grace: leave them a fifth of the phase.
	pushCfg.MaxPayloadBytes, pushCfg.StopGrace, pushCfg.Telemetry = cfg.MaxPayloadBytes, cfg.FeedStopTimeout*4/5, s.Telemetry
	if pushCfg.OnAnswer == nil {
		pushCfg.OnAnswer = ts.PushAnswer.Signal
	}
	s.Pusher = push.New(s.Lifecycle, s.API, s.Store, pushCfg, log.With("component", "push"))
	s.Janitor = janitor.New(s.Lifecycle, s.Store, janitor.Config{Retention: cfg.Retention, Interval: cfg.RetentionInterval,
		AuditRetention: cfg.AuditRetention, OnSweep: func(sw janitor.Sweep) {
			s.Telemetry.RetentionSwept(sw.Report())
			ts.JanitorSweep.Signal(sw)
		}},
		log.With("component", "janitor"))
	s.Tally = tally.New(s.Store, tally.Config{}, log.With("component", "tally"))
	s.Backfill = backfill.New(s.Store, backfill.Config{PauseAsBatch: true,
		OnBatch: func(p backfill.Progress) { s.Telemetry.HistoryBackfilled(p.Last.Moved, p.Left) },
		OnRun:   func(r backfill.Run) { s.Telemetry.HistoryBackfilled(0, r.Progress.Left) }},
		log.With("component", "history backfill"))
	return s, nil
}

// lastSweep is the janitor's last sweep as GET /history shows it.
func (s *Server) lastSweep() (api.Sweep, bool) {
	if s.Janitor == nil {
		return api.Sweep{}, false
	}
	sw, ok := s.Janitor.LastSweep()
	if !ok {
		return api.Sweep{}, false
	}
	h := sw.History
	out := api.Sweep{At: h.At, TookMs: h.Took.Milliseconds(), PartitionsDropped: len(h.Dropped),
		RowsDropped: h.RowsDropped, BatchDeleted: h.BatchDeleted, Held: h.Held}
	if sw.Err != nil {
		msg := sw.Err.Error()
		out.Error = &msg
	}
	return out, true
}

// dialRedis returns a client for cfg.RedisURL: one server, or with RedisCluster a
// cluster client seeded by the URL's addresses. Every key of a queue carries the
// hash tag {q:<name>}, so each script's keys live in one slot.
func dialRedis(cfg Config) (redis.UniversalClient, error) {
	if cfg.RedisCluster {
		opts, err := redis.ParseClusterURL(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("parse REDIS_URL as Redis Cluster seeds: %w", err)
		}
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("parse REDIS_URL: %w", err)
	}
	return redis.NewClient(opts), nil
}

// checkEvictionPolicy warns unless Redis refuses to evict keys: evicted buffer
// entries heal, but evicted rate-limit state would not. On a cluster it asks
// every master, since each holds some queues' keys.
func (s *Server) checkEvictionPolicy(ctx context.Context) {
	check := func(ctx context.Context, c redis.Cmdable, node string) error {
		policy, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			s.log.Warn("could not read Redis maxmemory-policy; make sure it is noeviction", "node", node, "err", err)
			return nil
		}
		if p := policy["maxmemory-policy"]; p != "noeviction" {
			s.log.Warn("Redis maxmemory-policy is not noeviction: Redis may evict TaskForge's keys under memory pressure; set maxmemory-policy noeviction",
				"node", node, "maxmemory-policy", p)
		}
		return nil
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return check(ctx, c, c.Options().Addr) })
		if err != nil {
			s.log.Warn("could not reach every Redis Cluster master to read maxmemory-policy", "err", err)
		}
		return
	}
	_ = check(ctx, s.rdb, "")
}

// Close releases the database pools and the Redis client (when New opened it).
func (s *Server) Close() {
	if s.hot != nil {
		s.hot.Close()
	}
	s.pool.Close()
	if s.ownsRedis {
		_ = s.rdb.Close()
	}
}

// ErrStopDeadline is what Serve's error matches (errors.Is) when a phase of the
// stop outlived its deadline; errors.As with *StopDeadlineError names the phase.
var ErrStopDeadline = errors.New("stop deadline passed")

// StopDeadlineError says which phase of a stop was still running at its deadline.
// Serve went on to the next phase; what was still running may still be.
type StopDeadlineError struct {
	Phase   string        // "http drain", "feed" or "rest"
	Timeout time.Duration // the phase's deadline
	Running []string      // the parts of the phase still running then
}

func (e *StopDeadlineError) Error() string {
	return fmt.Sprintf("%v: the %s phase was still running after %s (%s)", ErrStopDeadline, e.Phase, e.Timeout,
		strings.Join(e.Running, ", "))
}

// Is makes errors.Is(err, ErrStopDeadline) hold.
func (e *StopDeadlineError) Is(target error) bool { return target == ErrStopDeadline }

// Serve runs the API on ln and the background loops until ctx is done or one of
// them fails, then stops in three phases, each bounded by its timeout in Config:
//
//  1. http drain (ShutdownTimeout): no new connections; waiting long polls and
//     the dashboard's live streams are answered at once; requests in flight
//     finish, and those still running at the deadline are cut off.
//  2. feed (FeedStopTimeout): the dispatcher, the scheduler and the pushers.
//  3. rest (RestStopTimeout): the watchdog, the janitor, the telemetry folder,
//     the settings refresher, the pub/sub listeners and the dashboard's hub.
//
// A phase that overruns does not hold up the next; Serve then returns a
// *StopDeadlineError (matching ErrStopDeadline) naming it, joined with the error
// of the loop that stopped the replica, if one did. It returns nil after a clean
// stop.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	httpServer := &http.Server{Handler: s.Handler, ReadHeaderTimeout: 10 * time.Second}
	return runPhases(ctx, s.log, ln.Addr().String(), []phase{
		{name: "http drain", timeout: s.cfg.ShutdownTimeout,
			loops: []loop{{"http", func(context.Context) error {
				if err := httpServer.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
					return err
				}
				return nil
			}}},
			stop: func(ctx context.Context) error {
				s.API.Drain()
				s.Dashboard.Drain()
				err := httpServer.Shutdown(ctx)
				if err != nil {
					_ = httpServer.Close() // cut off what the drain left
				}
				return err
			}},
		{name: "feed", timeout: s.cfg.FeedStopTimeout, loops: []loop{
			{"dispatcher", s.Dispatcher.Run},
			{"scheduler", s.Scheduler.Run},
			{"pusher", s.Pusher.Run},
		}},
		{name: "rest", timeout: s.cfg.RestStopTimeout, loops: []loop{
			{"watchdog", s.Watchdog.Run},
			{"janitor", s.Janitor.Run},
			{"history backfill", s.Backfill.Run},
			{"tally", s.Tally.Run},
			{"settings refresher", s.Lifecycle.Limits().Run},
			{"wake listener", s.API.Run},
			{"done announcer", s.Lifecycle.Run},
		}, stop: func(context.Context) error { s.Dashboard.Close(); return nil }},
	})
}

// loop is a part of a replica that runs until its context ends.
type loop struct {
	name string
	run  func(context.Context) error
}

// phase is a group of loops that start together and stop together, within timeout,
// after stop (when set) has run. stop gets the phase's deadline.
type phase struct {
	name    string
	timeout time.Duration
	loops   []loop
	stop    func(ctx context.Context) error
}

// runPhases runs every phase's loops until ctx is done or a loop fails, then stops
// the phases one after the other, in order: see Serve.
func runPhases(ctx context.Context, log *slog.Logger, addr string, phases []phase) error {
	runCtx, stopRunning := context.WithCancel(ctx)
	defer stopRunning()
	var failed []error // the loops' errors
	var failedMu sync.Mutex
	type running struct {
		cancel context.CancelFunc
		done   []chan struct{} // one per loop, closed when it returns
	}
	started := make([]running, len(phases))
	for i, p := range phases {
		// A phase's loops outlive ctx (keeping its values) until their phase stops.
		phaseCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		started[i].cancel = cancel
		for _, l := range p.loops {
			done := make(chan struct{})
			started[i].done = append(started[i].done, done)
			go func() {
				defer close(done)
				if err := l.run(phaseCtx); err != nil {
					failedMu.Lock()
					failed = append(failed, fmt.Errorf("%s: %w", l.name, err))
					failedMu.Unlock()
					stopRunning()
				}
			}()
		}
	}
	log.Info("taskforge serving", "addr", addr)

	<-runCtx.Done()
	var overran []error
	for i, p := range phases {
		start := time.Now()
		deadline, release := context.WithTimeout(context.Background(), p.timeout)
		stopErr := make(chan error, 1)
		if p.stop != nil {
			go func() { stopErr <- p.stop(deadline) }()
		} else {
			stopErr <- nil
		}
		started[i].cancel()
		var late []string
		if err := <-stopErr; err != nil {
			late = append(late, "its stop ("+err.Error()+")")
		}
		for j, done := range started[i].done {
			select {
			case <-done:
				continue // ended, even if the deadline has passed too
			default:
			}
			select {
			case <-done:
			case <-deadline.Done():
				late = append(late, p.loops[j].name)
			}
		}
		release()
		if len(late) > 0 {
			log.Warn("stop phase overran its deadline", "phase", p.name, "timeout", p.timeout, "running", late)
			overran = append(overran, &StopDeadlineError{Phase: p.name, Timeout: p.timeout, Running: late})
			continue
		}
		log.Info("stop phase done", "phase", p.name, "took", time.Since(start))
	}
	failedMu.Lock()
	defer failedMu.Unlock()
	return errors.Join(append(failed, overran...)...)
}

// ListenAndServe listens on Config.Listen and calls Serve.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
	}
	if s.cfg.TLSCertFile != "" || s.cfg.TLSKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		if err != nil {
			ln.Close()
			return fmt.Errorf("load TLS certificate: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	return s.Serve(ctx, ln)
}
