// Package api serves TaskForge's HTTP contract (docs/api.md, and as OpenAPI 3.1 in
// openapi.yaml, served at GET /openapi.json): queues, tasks, the worker protocol,
// the dead-letter queue and health endpoints.
//
// Handlers decode and validate every input before touching anything (bad input gets
// a 4xx JSON error and changes nothing), then make every task transition through
// package lifecycle, which owns its statement, Redis follow-up and telemetry, and
// encode the answer. The API never changes task state in Redis and keeps no state
// that another replica would need: long-poll waiters are local, and are woken by
// the buffer's pub/sub channel, which every replica hears.
package api

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Config tunes the API. Zero fields take the defaults.
type Config struct {
	// LeaseTimeout is the lease a poll or heartbeat grants. Defaults to 30s.
	LeaseTimeout time.Duration
	// HeartbeatInterval is advertised to workers. Defaults to 10s.
	HeartbeatInterval time.Duration
	// MaxPayloadBytes bounds a task's payload and an ack's result. Defaults to 1 MiB.
	MaxPayloadBytes int64
	// BackoffBase and BackoffMax are the backoff defaults of new queues.
	// Default to 1s and 1h.
	BackoffBase, BackoffMax time.Duration
	// WakeFallback bounds how long a long-poll waits between buffer checks when no
	// wake-up arrives (a lost pub/sub message). Defaults to 1s.
	WakeFallback time.Duration
	// Telemetry receives metrics and transition logs; nil disables them.
	Telemetry *telemetry.Telemetry
	// TrustedOrigins may send state-changing requests cross-origin (a reverse proxy
	// that serves the dashboard under another host); every other cross-site browser
	// request that changes state is refused.
	TrustedOrigins []string
	// Auth, when set, authenticates and authorizes every request (see package auth);
	// it runs after the cross-origin guard. Nil leaves the API open.
	Auth gin.HandlerFunc
	// Audit, when set, runs after Auth on every request (package audit records the
	// operator actions among them).
	Audit gin.HandlerFunc
	// Scheduler, when set, is told when a schedule is created or changed, so that
	// the replica's scheduler re-plans its sleep at once; other replicas' schedulers
	// see the change within their longest pause.
	Scheduler ScheduleWaker
	// LastSweep, when set, reports this replica's last retention sweep (GET
	// /history); false before the first one.
	LastSweep func() (Sweep, bool)
}

// ScheduleWaker is told of schedule changes; *scheduler.Scheduler is one.
type ScheduleWaker interface {
	// Wake has the scheduler look for due schedules at once and re-plan its sleep.
	Wake()
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.LeaseTimeout = cmp.Or(c.LeaseTimeout, 30*time.Second)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, 10*time.Second)
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, 1<<20)
	c.BackoffBase = cmp.Or(c.BackoffBase, time.Second)
	c.BackoffMax = cmp.Or(c.BackoffMax, time.Hour)
	c.WakeFallback = cmp.Or(c.WakeFallback, time.Second)
	return c
}

// Server is the HTTP API of one replica.
type Server struct {
	store  *storage.Store
	buf    *buffer.Buffer
	lc     *lifecycle.Lifecycle // every task transition (claim, ack, cancel, …)
	cfg    Config
	log    *slog.Logger
	hub    *wakeHub
	limits *ratelimit.Settings // the lifecycle's
	engine *gin.Engine

	seenMu sync.Mutex
	seen   map[string]time.Time // worker id → when this replica last recorded it

	drainOnce sync.Once
	draining  chan struct{} // closed by Drain: long polls return at once

	// bulkRows and afterBulkBatch, set only by tests (export_test.go), override the
	// rows per transaction of bulk operations and hear of each committed batch.
	bulkRows       int
	afterBulkBatch func(rows int)
}

// Drain makes waiting long polls return (empty) at once, so a shutdown does not wait
// for them; other requests are unaffected.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// New returns a Server whose handlers make every task transition through lc. Call
// Run to receive wake-ups and Handler to serve.
func New(store *storage.Store, buf *buffer.Buffer, lc *lifecycle.Lifecycle, cfg Config, log *slog.Logger) (*Server, error) {
	gin.SetMode(gin.ReleaseMode)
	s := &Server{store: store, buf: buf, lc: lc, cfg: cfg.WithDefaults(), log: log, hub: newWakeHub(),
		limits: lc.Limits(), seen: make(map[string]time.Time), draining: make(chan struct{})}
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.ContextWithFallback = true
	guard, err := s.crossOriginGuard(s.cfg.TrustedOrigins)
	if err != nil {
		return nil, err
	}
	e.Use(s.cfg.Telemetry.Middleware(), gin.CustomRecovery(logRecovered(log)), guard)
	if s.cfg.Auth != nil {
		e.Use(s.cfg.Auth)
	}
	if s.cfg.Audit != nil {
		e.Use(s.cfg.Audit)
	}
	e.NoRoute(func(c *gin.Context) {
		s.fail(c, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such route"})
	})
	e.NoMethod(func(c *gin.Context) {
		s.fail(c, &Error{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed, Message: "method not allowed on this route"})
	})

	openapi, err := openAPIJSON()
	if err != nil {
		return nil, err
	}
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/openapi.json", serveOpenAPI(openapi))
	if s.cfg.Telemetry != nil {
		e.GET("/metrics", gin.WrapH(s.cfg.Telemetry.Handler()))
	} else {
		e.GET("/metrics", gin.WrapH(promhttp.Handler()))
	}

	e.POST("/queues", s.createQueue)
	e.GET("/queues", s.listQueues)
	e.GET("/queues/:name", s.getQueue)
	e.PATCH("/queues/:name", s.updateQueue)
	e.POST("/queues/:name/pause", s.pauseQueue)
	e.POST("/queues/:name/resume", s.resumeQueue)
	e.DELETE("/queues/:name", s.deleteQueue)
	e.GET("/queues/:name/stats", s.stats)
	e.GET("/queues/:name/groups", s.listGroups)
	e.PUT("/queues/:name/groups/:group", s.putGroup)
	e.GET("/queues/:name/groups/:group", s.getGroup)
	e.DELETE("/queues/:name/groups/:group", s.deleteGroup)

	e.POST("/queues/:name/tasks", s.enqueue)
	e.POST("/queues/:name/tasks/batch", s.enqueueBatch)
	e.GET("/queues/:name/tasks", s.listTasks)
	e.GET("/queues/:name/tasks/:id", s.getTask)
	e.DELETE("/queues/:name/tasks/:id", s.cancelTask)
	e.POST("/queues/:name/tasks/cancel", s.cancelMany)

	e.GET("/queues/:name/dlq", s.listDead)
	e.POST("/queues/:name/dlq/replay", s.replayMany)
	e.POST("/queues/:name/dlq/:id/replay", s.replayOne)
	e.DELETE("/queues/:name/dlq/:id", s.discardDead)
	e.DELETE("/queues/:name/dlq", s.discardMany)

	e.POST("/workers/poll", s.poll)
	e.POST("/workers/heartbeat", s.heartbeat)
	e.POST("/workers/heartbeat/batch", s.heartbeatBatch)
	e.POST("/workers/ack", s.ack)
	e.POST("/workers/ack/batch", s.ackBatch)
	e.POST("/workers/nack", s.nack)
	e.POST("/workers/release", s.release)
	e.GET("/workers", s.listWorkers)
	e.GET("/history", s.history)

	e.POST("/schedules", s.createSchedule)
	e.GET("/schedules", s.listSchedules)
	e.GET("/schedules/:name", s.getSchedule)
	e.PATCH("/schedules/:name", s.updateSchedule)
	e.DELETE("/schedules/:name", s.deleteSchedule)
	e.POST("/schedules/:name/trigger", s.triggerSchedule)

	e.POST("/workflows", s.submitWorkflow)
	e.GET("/workflows", s.listWorkflows)
	e.GET("/workflows/:id", s.getWorkflow)
	e.DELETE("/workflows/:id", s.cancelWorkflow)
	s.engine = e
	return s, nil
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.engine }

// Engine returns the gin engine, for mounting further routes (dashboard, metrics).
func (s *Server) Engine() *gin.Engine { return s.engine }

// Run rouses long-poll waiters on buffer wake-ups and task waiters on
// announcements of finished tasks, until ctx is done. It returns nil when ctx is
// cancelled. The queue settings the handlers read (the lifecycle's) are kept fresh
// by their own loop, ratelimit.Settings.Run, which the replica runs beside this one.
func (s *Server) Run(ctx context.Context) error {
	sub := s.buf.Client().Subscribe(ctx, s.buf.WakeChannel(), s.buf.DoneChannel())
	defer sub.Close()
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-ch:
			if !ok {
				return nil
			}
			if msg.Channel == s.buf.DoneChannel() {
				s.lc.HearEnded(buffer.ParseDone(msg.Payload))
			} else if queue, n, ok := buffer.ParseWake(msg.Payload); ok {
				s.hub.wake(queue, n)
			}
		}
	}
}

func (s *Server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

func (s *Server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.fail(c, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "PostgreSQL unreachable: " + err.Error()})
		return
	}
	if err := s.buf.Client().Ping(ctx).Err(); err != nil {
		s.fail(c, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "Redis unreachable: " + err.Error()})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready"})
}
