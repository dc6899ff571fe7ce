// Package dispatcher mirrors due work from PostgreSQL into the Redis buffer.
//
// It moves due pending and retry tasks to 'claimed' in batches (FOR UPDATE SKIP
// LOCKED, so any number of replicas can run it) and adds their ids to the queue's
// sorted set. It keeps each buffer topped up to a target size rather than mirroring
// the whole backlog, and its repair pass re-adds claimed tasks whose buffer entry
// was lost (Redis restart, FLUSHALL, a crash between commit and ZADD).
//
// The dispatcher never changes a task that is executing, and never decides whether a
// task runs: the claim in PostgreSQL does.
package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/crashpoint"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Config tunes a Dispatcher. Zero fields take the defaults.
type Config struct {
	// Interval between passes when no NOTIFY arrives. Defaults to 1s.
	Interval time.Duration
	// BufferTarget is how many ids each queue's buffer is topped up to. Defaults to 1000.
	BufferTarget int
	// BatchSize is the most tasks one dispatch statement moves. Defaults to 500.
	BatchSize int
	// RepairInterval is how often the repair pass runs. Defaults to 5s.
	RepairInterval time.Duration
	// RepairAfter is how long a task must have been buffered before a missing entry
	// counts as lost. Defaults to 2s.
	RepairAfter time.Duration
	// Telemetry receives dispatch transitions; nil disables them.
	Telemetry *telemetry.Telemetry
	// ListenConnConfig is where the LISTEN connection goes. Nil means a connection
	// configured like the store's pool, which must then reach PostgreSQL directly
	// (a transaction pooler does not deliver notifications to a session).
	ListenConnConfig *pgx.ConnConfig
	// NoListen turns LISTEN off: passes then run on the tick, on Wake and when
	// the earliest waiting task falls due.
	NoListen bool
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Interval = cmp.Or(c.Interval, time.Second)
	c.BufferTarget = cmp.Or(c.BufferTarget, 1000)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.RepairInterval = cmp.Or(c.RepairInterval, 5*time.Second)
	c.RepairAfter = cmp.Or(c.RepairAfter, 2*time.Second)
	return c
}

// Dispatcher moves due tasks into the buffer. Create it with New; run it with Run.
type Dispatcher struct {
	store *storage.Store
	buf   *buffer.Buffer
	cfg   Config
	log   *slog.Logger
	wake  chan struct{}
	// lastLowWake is when WakeLow last woke the loop (Unix nanoseconds).
	lastLowWake atomic.Int64
}

// New returns a Dispatcher.
func New(store *storage.Store, buf *buffer.Buffer, cfg Config, log *slog.Logger) *Dispatcher {
	return &Dispatcher{store: store, buf: buf, cfg: cfg.WithDefaults(), log: log, wake: make(chan struct{}, 1)}
}

// LowWater is the buffer size below which a poll asks for a refill (WakeLow), so a
// backlog in PostgreSQL keeps flowing without waiting for a tick.
const LowWater = 250

// lowWakeEvery bounds how often pops of a nearly empty buffer wake the dispatcher.
const lowWakeEvery = 20 * time.Millisecond

// WakeLow asks for a refill pass because a buffer fell below LowWater; calls closer
// together than lowWakeEvery are merged, so an empty backlog costs few passes.
func (d *Dispatcher) WakeLow() {
	now := time.Now().UnixNano()
	last := d.lastLowWake.Load()
	if now-last < int64(lowWakeEvery) || !d.lastLowWake.CompareAndSwap(last, now) {
		return
	}
	d.Wake()
}

// Wake asks for a dispatch pass as soon as possible.
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run dispatches until ctx is done: on every NOTIFY on storage.DueChannel, on every
// tick, and repairs lost buffer entries every RepairInterval. It returns nil when
// ctx is cancelled.
func (d *Dispatcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.listen(ctx)
	}()
	defer wg.Wait()

	tick := time.NewTimer(0)
	defer tick.Stop()
	lastRepair := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-d.wake:
		}
		if _, err := d.DispatchOnce(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("dispatch pass failed", "err", err)
		}
		if time.Since(lastRepair) >= d.cfg.RepairInterval {
			lastRepair = time.Now()
			if n, err := d.RepairOnce(ctx); err != nil && ctx.Err() == nil {
				d.log.Warn("buffer repair failed", "err", err)
			} else if n > 0 {
				d.log.Info("re-added lost buffer entries", "count", n)
			}
		}
		tick.Reset(d.nextPass(ctx))
	}
}

// nextPass is how long to sleep: until the earliest waiting task becomes due (a
// schedule or the end of a retry backoff), at most a tick.
func (d *Dispatcher) nextPass(ctx context.Context) time.Duration {
	wait := jitter(d.cfg.Interval)
	if due, ok, err := d.store.NextDue(ctx); err == nil && ok {
		// A few milliseconds late, so the task is due on the database clock.
		wait = min(wait, max(due+2*time.Millisecond, time.Millisecond))
	}
	return wait
}

// jitter spreads replicas' ticks by up to ±10%.
func jitter(d time.Duration) time.Duration {
	return d - d/10 + rand.N(d/5+1)
}

// listen wakes the loop on NOTIFY, unless NoListen. It reconnects with backoff
// until ctx is done.
func (d *Dispatcher) listen(ctx context.Context) {
	if d.cfg.NoListen {
		return
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := d.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("dispatcher LISTEN connection lost; falling back to ticks", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (d *Dispatcher) listenOnce(ctx context.Context) error {
	cfg := d.cfg.ListenConnConfig
	if cfg == nil {
		cfg = d.store.Pool().Config().ConnConfig
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+storage.DueChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	d.Wake() // anything enqueued while we were not listening
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		d.Wake()
	}
}

// DispatchOnce tops up the buffer of every queue that is not paused from its due
// tasks and returns how many tasks it moved.
func (d *Dispatcher) DispatchOnce(ctx context.Context) (int, error) {
	queues, err := d.store.ListQueues(ctx)
	if err != nil {
		return 0, err
	}
	active := queues[:0]
	names := make([]string, 0, len(queues))
	for _, q := range queues {
		if !q.Paused { // a paused queue's tasks stay in PostgreSQL
			active = append(active, q)
			names = append(names, q.Name)
		}
	}
	sizes, err := d.buf.Sizes(ctx, names)
	if err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	for _, q := range active {
		weight := buffer.LevelWeightMs(ratelimit.Of(q).AgingMs)
		room := d.cfg.BufferTarget - int(sizes[q.Name])
		for room > 0 {
			batch := min(room, d.cfg.BatchSize)
			moved, err := d.dispatchQueue(ctx, q.Name, batch, weight)
			total += moved
			if err != nil {
				errs = append(errs, err)
				break
			}
			if moved < batch {
				break
			}
			room -= moved
		}
	}
	return total, errors.Join(errs...)
}

func (d *Dispatcher) dispatchQueue(ctx context.Context, queue string, limit int, weight int64) (int, error) {
	tasks, err := d.store.DispatchDue(ctx, queue, limit, weight)
	if err != nil {
		return 0, err
	}
	for _, t := range tasks {
		d.cfg.Telemetry.Transition(telemetry.Transition{TaskID: t.ID, Queue: queue, From: t.FromStatus, To: storage.StatusClaimed})
		d.cfg.Telemetry.TaskSpan("taskforge.dispatch", t.Traceparent,
			attribute.String("taskforge.task_id", t.ID.String()), attribute.String("taskforge.queue", queue))
	}
	if len(tasks) > 0 {
		crashpoint.Hit(crashpoint.AfterDispatchCommit)
	}
	// Committed as claimed: if this ZADD fails or we crash now, RepairOnce re-adds them.
	if err := d.buf.Add(ctx, queue, tasks, weight); err != nil {
		return len(tasks), err
	}
	return len(tasks), nil
}

// RepairOnce re-adds claimed tasks whose buffer entries are missing and rebuilds the
// concurrency slots of capped queues from PostgreSQL. It returns how many entries it
// re-added. A re-added id that a poller popped meanwhile is harmless: its second
// claim finds it no longer claimable and drops it.
func (d *Dispatcher) RepairOnce(ctx context.Context) (int, error) {
	queues, err := d.store.ListQueues(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, q := range queues {
		limits := ratelimit.Of(q)
		if limits.MaxConcurrency > 0 {
			if err := d.buf.SyncSlots(ctx, d.store, q.Name); err != nil {
				return total, err
			}
		}
		claimed, err := d.store.ListClaimed(ctx, q.Name, d.cfg.RepairAfter, 4*d.cfg.BufferTarget)
		if err != nil {
			return total, err
		}
		missing, err := d.buf.Missing(ctx, q.Name, claimed)
		if err != nil {
			return total, err
		}
		if err := d.buf.Add(ctx, q.Name, missing, buffer.LevelWeightMs(limits.AgingMs)); err != nil {
			return total, err
		}
		total += len(missing)
	}
	return total, nil
}
