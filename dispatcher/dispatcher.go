// Package dispatcher mirrors due work from PostgreSQL into the Redis buffer.
//
// It decides when and how much to dispatch: it keeps each buffer topped up to a
// target size rather than mirroring the whole backlog, in batches that its Mover
// (package lifecycle, which owns the transition end to end) moves to buffered
// (status 'claimed'; FOR UPDATE SKIP LOCKED, so any number of replicas can run it)
// and adds to the queue's sorted set. Its repair pass re-adds buffered tasks whose
// buffer entry was lost (Redis restart, FLUSHALL, a crash between commit and ZADD)
// and rebuilds the concurrency slots: no task changes status there, the Redis side
// is only made to match PostgreSQL again, so repair stays here rather than in the
// lifecycle.
//
// Its costs follow the work, not the number of queues: a wake-up for queue q (a
// NOTIFY from an enqueue, a poll that drained q's buffer, a reclaim) dispatches q
// alone; a timed pass dispatches the queues whose waiting tasks became due since the
// last one, found in one statement; and only the periodic sweep, one statement every
// SweepInterval, looks at every queue, as a safety net for a lost wake-up.
//
// The dispatcher never changes a task that is executing, and never decides whether a
// task runs: the claim in PostgreSQL does.
package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

// Config tunes a Dispatcher. Zero fields take the defaults.
type Config struct {
	// Interval is the longest pause between timed passes, which dispatch the queues
	// whose scheduled or retrying tasks became due. Defaults to 1s.
	Interval time.Duration
	// SweepInterval is how often a pass looks at every queue for due work that no
	// wake-up announced. Defaults to 5s.
	SweepInterval time.Duration
	// BufferTarget is how many ids each queue's buffer is topped up to. Defaults to 1000.
	BufferTarget int
	// BatchSize is the most tasks one dispatch statement moves. Defaults to 500.
	BatchSize int
	// RepairInterval is how often the repair pass runs. Defaults to 5s.
	RepairInterval time.Duration
	// RepairAfter is how long a task must have been buffered before a missing entry
	// counts as lost. Defaults to 2s.
	RepairAfter time.Duration
	// GroupWindow is the most (priority, group) pairs of a fair queue one look
	// lists (dispatcher/fair.go). Defaults to BufferTarget.
	GroupWindow int
	// RepairPage is how many buffered tasks one repair statement checks; a pass
	// checks one page, resuming where the last ended, unless Redis lost its data.
	// Defaults to 4 × BufferTarget.
	RepairPage int
	// ListenConnConfig is where the LISTEN connection goes. Nil means a connection
	// configured like the store's pool, which must then reach PostgreSQL directly
	// (a transaction pooler does not deliver notifications to a session).
	ListenConnConfig *pgx.ConnConfig
	// NoListen turns LISTEN off: passes then run on the tick, on Wake and when
	// the earliest waiting task falls due.
	NoListen bool
	// OnPass, when set, hears of every pass Run makes, after it (tests use it to
	// wait for a pass instead of sleeping). It runs on Run's goroutine.
	OnPass func(Pass)
}

// Pass describes one pass of Run.
type Pass struct {
	Timed  bool           // it looked for tasks that became due
	Sweep  bool           // it looked at every queue
	Queues []string       // the queues it dispatched (topped up), sorted
	Moved  map[string]int // tasks moved into each queue's buffer
	// Settled are the fair queues it left alone: only the sweep named them, and
	// each of their groups with due work holds buffered ids (fair.go).
	Settled []string
	Err     error
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Interval = cmp.Or(c.Interval, time.Second)
	c.SweepInterval = cmp.Or(c.SweepInterval, 5*time.Second)
	c.BufferTarget = cmp.Or(c.BufferTarget, 1000)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.RepairInterval = cmp.Or(c.RepairInterval, 5*time.Second)
	c.RepairAfter = cmp.Or(c.RepairAfter, 2*time.Second)
	c.RepairPage = cmp.Or(c.RepairPage, 4*c.BufferTarget)
	c.GroupWindow = cmp.Or(c.GroupWindow, c.BufferTarget)
	return c
}

// dueSlack is how far back a timed pass looks before its previous one: a task
// written with a due time just before that pass, by a transaction that committed
// after it, is still found.
const dueSlack = time.Second

// Dispatcher moves due tasks into the buffer. Create it with New; run it with Run.
type Dispatcher struct {
	store *storage.Store
	buf   *buffer.Buffer
	mover Mover
	wakes *Wakes
	cfg   Config
	log   *slog.Logger

	// Owned by Run's goroutine.
	horizon      time.Time // database clock of the last timed pass
	repairCursor *storage.BufferedCursor

	// groupCursors is where each fair queue's next look at its groups starts
	// (fair.go); a queue is absent when the next look starts from its first group.
	groupMu      sync.Mutex
	groupCursors map[string]groupCursor
	// fairSettled and fairCycles, under groupMu, let sweeps leave alone a fair
	// queue whose groups all hold their heads (fair.go).
	fairSettled map[string]fairSettled
	fairCycles  map[string]fairCycle
	// listening is true while the LISTEN connection is up.
	listening atomic.Bool
}

// Mover runs the dispatch transition; *lifecycle.Lifecycle is one.
type Mover interface {
	// Dispatch moves up to limit due pending and retry tasks of queue to buffered
	// and into its buffer with weight (buffer.LevelWeightMs), with the transitions'
	// telemetry, and reports how many it moved (some, even with an error, when the
	// statement committed and the buffer failed: the repair pass heals those).
	Dispatch(ctx context.Context, queue string, limit int, weight int64) (int, error)
	// DispatchGroups is Dispatch for a fair queue: up to each pick's N due tasks of
	// its group and priority, into the groups' buffers.
	DispatchGroups(ctx context.Context, queue string, picks []storage.GroupPick, weight int64) (int, error)
}

// New returns a Dispatcher that reads and repairs through store and buf, moves due
// tasks through mover and runs a pass on every wake-up posted to wakes (nil: a
// Wakes of its own, reached through the Dispatcher's Wake, WakeLow and WakeAll).
func New(store *storage.Store, buf *buffer.Buffer, mover Mover, wakes *Wakes, cfg Config, log *slog.Logger) *Dispatcher {
	if wakes == nil {
		wakes = NewWakes()
	}
	return &Dispatcher{store: store, buf: buf, mover: mover, wakes: wakes, cfg: cfg.WithDefaults(), log: log}
}

// Wake asks for queue to be dispatched as soon as possible (Wakes.Wake).
func (d *Dispatcher) Wake(queue string) { d.wakes.Wake(queue) }

// WakeLow asks for a refill of queue's buffer (Wakes.WakeLow).
func (d *Dispatcher) WakeLow(queue string) { d.wakes.WakeLow(queue) }

// WakeAll asks for a sweep of every queue as soon as possible (Wakes.WakeAll).
func (d *Dispatcher) WakeAll() { d.wakes.WakeAll() }

// Run dispatches until ctx is done: the queue named by every NOTIFY on
// storage.DueChannel and every Wake, the queues whose tasks became due on every
// timed pass, every queue on every sweep; and it repairs lost buffer entries every
// RepairInterval. It returns nil when ctx is cancelled.
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
	deadline := time.Now() // of the next timed pass
	var lastRepair, lastSweep time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-d.wakes.signal:
		}
		timed := !time.Now().Before(deadline)
		sweep := time.Since(lastSweep) >= d.cfg.SweepInterval
		if sweep {
			lastSweep = time.Now()
		}
		p := d.pass(ctx, timed, sweep)
		if p.Err != nil && ctx.Err() == nil {
			d.log.Warn("dispatch pass failed", "err", p.Err)
		}
		if time.Since(lastRepair) >= d.cfg.RepairInterval {
			lastRepair = time.Now()
			if n, err := d.RepairStep(ctx); err != nil && ctx.Err() == nil {
				d.log.Warn("buffer repair failed", "err", err)
			} else if n > 0 {
				d.log.Info("re-added lost buffer entries", "count", n)
			}
		}
		// After a timed pass, plan the next; after a wake-up, bring it forward if a
		// task the wake-up announced (a retry, a schedule) is due sooner.
		if next := time.Now().Add(d.nextPass(ctx, lastSweep.Add(d.cfg.SweepInterval))); timed || next.Before(deadline) {
			deadline = next
			tick.Reset(time.Until(deadline))
		}
		if d.cfg.OnPass != nil {
			d.cfg.OnPass(p)
		}
	}
}

// pass dispatches the queues woken since the last pass; when timed, also those whose
// waiting tasks became due; when sweep (or asked by WakeAll), every queue with due
// work.
func (d *Dispatcher) pass(ctx context.Context, timed, sweep bool) Pass {
	queues, asked := d.wakes.take()
	if asked {
		d.unsettleAll() // a wake-up may have been lost
	}
	// Only the periodic sweep names the queues it alone finds: those it may skip.
	named := map[string]bool{}
	if sweep && !asked && !d.horizon.IsZero() {
		for _, q := range queues {
			named[q] = true
		}
	} else {
		named = nil
	}
	sweep = sweep || asked || d.horizon.IsZero()

	var errs []error
	switch {
	case sweep:
		if named != nil {
			// What became due since the last timed pass names its queues, as a
			// timed pass would: a sweep that may skip settled queues must not skip those.
			due, _, err := d.store.NewlyDue(ctx, d.horizon.Add(-dueSlack))
			for _, q := range due {
				named[q] = true
			}
			if err != nil {
				named = nil
				errs = append(errs, err)
			}
		}
		// What is due now, the sweep finds; the next timed pass looks from here on.
		now, err := d.store.Now(ctx)
		if err == nil {
			d.horizon = now
		}
		all, err2 := d.store.DueQueues(ctx)
		queues = append(queues, all...)
		errs = append(errs, err, err2)
	case timed:
		due, now, err := d.store.NewlyDue(ctx, d.horizon.Add(-dueSlack))
		if err == nil {
			d.horizon = now
			queues = append(queues, due...)
		}
		errs = append(errs, err)
	}
	p := Pass{Timed: timed, Sweep: sweep, Moved: map[string]int{}}
	var swept func(string) bool
	if named != nil {
		swept = func(q string) bool { return !named[q] }
	}
	p.Queues, errs = d.dispatch(ctx, queues, swept, &p, errs)
	p.Err = errors.Join(errs...)
	if p.Err != nil { // try them again on the next pass, not only at the sweep
		d.wakes.again(queues)
	}
	return p
}

// nextPass is how long to sleep: until the earliest waiting task that the last timed
// pass did not see becomes due (a schedule or the end of a retry backoff), at once
// when one is due already, at most a tick, and never past the next sweep.
func (d *Dispatcher) nextPass(ctx context.Context, nextSweep time.Time) time.Duration {
	wait := min(jitter(d.cfg.Interval), max(time.Until(nextSweep), time.Millisecond))
	if due, ok, err := d.store.NextDue(ctx, d.horizon); err == nil && ok {
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
	l, err := d.store.ListenDue(ctx, d.cfg.ListenConnConfig)
	if err != nil {
		return err
	}
	defer l.Close(context.WithoutCancel(ctx))
	d.listening.Store(true)
	defer d.listening.Store(false)
	d.WakeAll() // anything enqueued while we were not listening
	for {
		queue, err := l.Next(ctx)
		if err != nil {
			return err
		}
		if queue == "" {
			d.WakeAll()
		} else {
			d.Wake(queue) // the queue that has new work
		}
	}
}

// DispatchOnce tops up the buffer of every queue that is not paused and holds due
// tasks, and returns how many tasks it moved.
func (d *Dispatcher) DispatchOnce(ctx context.Context) (int, error) {
	queues, err := d.store.DueQueues(ctx)
	if err != nil {
		return 0, err
	}
	return d.DispatchQueues(ctx, queues...)
}

// DispatchQueues tops up the buffers of the named queues (those that exist and are
// not paused) from their due tasks and returns how many tasks it moved. Its cost
// follows the number of queues named, whatever the number that exist.
func (d *Dispatcher) DispatchQueues(ctx context.Context, names ...string) (int, error) {
	p := Pass{Moved: map[string]int{}}
	_, errs := d.dispatch(ctx, names, nil, &p, nil)
	total := 0
	for _, n := range p.Moved {
		total += n
	}
	return total, errors.Join(errs...)
}

// dispatch tops up the named queues, records what it moved into each in p.Moved
// and the fair queues it left alone in p.Settled, and returns the queues it looked
// at (sorted) and errs with its own errors appended. swept (nil: none) says which
// queues only the periodic sweep named.
func (d *Dispatcher) dispatch(ctx context.Context, names []string, swept func(string) bool, p *Pass, errs []error) ([]string, []error) {
	moved := p.Moved
	if len(names) == 0 {
		return nil, errs
	}
	slices.Sort(names)
	names = slices.Compact(names)
	queues, err := d.store.QueuesNamed(ctx, names)
	if err != nil {
		return names, append(errs, err)
	}
	active := queues[:0]
	names = make([]string, 0, len(queues))
	for _, q := range queues {
		if !q.Paused { // a paused queue's tasks stay in PostgreSQL
			active = append(active, q)
			names = append(names, q.Name)
		}
	}
	sizes, err := d.buf.Sizes(ctx, names)
	if err != nil {
		return names, append(errs, err)
	}
	for _, q := range active {
		limits := ratelimit.Of(q)
		weight := buffer.LevelWeightMs(limits.AgingMs)
		if limits.Fair {
			n, settled, err := d.dispatchFair(ctx, q.Name, weight, swept != nil && swept(q.Name))
			if settled {
				p.Settled = append(p.Settled, q.Name)
			}
			if n > 0 {
				moved[q.Name] += n
			}
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		room := d.cfg.BufferTarget - int(sizes[q.Name])
		for room > 0 {
			batch := min(room, d.cfg.BatchSize)
			n, err := d.mover.Dispatch(ctx, q.Name, batch, weight)
			if n > 0 {
				moved[q.Name] += n
			}
			if err != nil {
				errs = append(errs, err)
				break
			}
			if n < batch {
				break
			}
			room -= n
		}
	}
	return names, errs
}

// RepairStep rebuilds the concurrency slots of capped queues and checks one page of
// buffered tasks, resuming where the last step ended; when Redis has lost its data
// since the last look, it checks every page at once.
// It returns how many entries it re-added. Run calls it every RepairInterval.
func (d *Dispatcher) RepairStep(ctx context.Context) (int, error) {
	if err := d.syncSlots(ctx); err != nil {
		return 0, err
	}
	lost, err := d.buf.Lost(ctx)
	if err != nil {
		return 0, err
	}
	if lost {
		d.unsettleAll() // the fair queues' counts of emptied groups restarted
		if err := d.mirrorGroups(ctx); err != nil {
			return 0, err
		}
		d.repairCursor = nil
		return d.repairBuffered(ctx, -1)
	}
	return d.repairBuffered(ctx, 1)
}

// RepairOnce re-adds buffered tasks whose buffer entries are missing, checking every
// buffered task of every queue a page at a time, and rebuilds the concurrency slots
// of capped queues from PostgreSQL. It returns how many entries it re-added. A
// re-added id that a poller popped meanwhile is harmless: its second claim finds it
// no longer claimable and drops it.
func (d *Dispatcher) RepairOnce(ctx context.Context) (int, error) {
	if err := d.syncSlots(ctx); err != nil {
		return 0, err
	}
	d.repairCursor = nil
	return d.repairBuffered(ctx, -1)
}

// syncSlots rebuilds every capped queue's concurrency slots, and every capped fair
// queue's queue and group slots, from one statement each.
func (d *Dispatcher) syncSlots(ctx context.Context) error {
	executing, err := d.store.ExecutingInCappedQueues(ctx)
	if err != nil {
		return err
	}
	for queue, ids := range executing {
		if _, _, err := d.buf.Reconcile(ctx, queue, ids, buffer.SlotGrace); err != nil {
			return err
		}
	}
	grouped, err := d.store.ExecutingInFairQueues(ctx)
	if err != nil {
		return err
	}
	for queue, slots := range grouped {
		if _, _, _, _, err := d.buf.ReconcileGrouped(ctx, queue, slots, buffer.SlotGrace); err != nil {
			return err
		}
	}
	return nil
}

// repairBuffered checks up to pages pages of buffered tasks (all when negative) from
// the cursor on, re-adds those missing from their buffers, and returns how many.
func (d *Dispatcher) repairBuffered(ctx context.Context, pages int) (int, error) {
	total := 0
	for ; pages != 0; pages-- {
		page, err := d.store.ListBuffered(ctx, d.repairCursor, d.cfg.RepairAfter, d.cfg.RepairPage)
		if err != nil {
			return total, err
		}
		if len(page) < d.cfg.RepairPage {
			d.repairCursor = nil // the last page: start again next time
		} else {
			last := page[len(page)-1]
			d.repairCursor = &storage.BufferedCursor{DispatchedAt: last.DispatchedAt, ID: last.ID}
		}
		n, err := d.readd(ctx, page)
		total += n
		if err != nil || d.repairCursor == nil {
			return total, err
		}
	}
	return total, nil
}

// readd adds those of page that their queue's buffer lacks (a fair queue's: their
// group's buffer).
func (d *Dispatcher) readd(ctx context.Context, page []storage.BufferedTask) (int, error) {
	if len(page) == 0 {
		return 0, nil
	}
	byQueue := map[string][]storage.BufferedTask{}
	for _, t := range page {
		byQueue[t.Queue] = append(byQueue[t.Queue], t)
	}
	queues, err := d.store.QueuesNamed(ctx, slices.Collect(maps.Keys(byQueue)))
	if err != nil {
		return 0, err
	}
	var plain []storage.BufferedTask
	fair := map[string]storage.Queue{}
	for _, q := range queues {
		if ratelimit.Of(q).Fair {
			fair[q.Name] = q
		} else {
			plain = append(plain, byQueue[q.Name]...)
		}
	}
	missing, err := d.buf.MissingOf(ctx, plain)
	if err != nil {
		return 0, err
	}
	lost := map[string][]storage.Buffered{}
	for _, t := range missing {
		lost[t.Queue] = append(lost[t.Queue], t.Buffered)
	}
	total := 0
	for _, q := range queues {
		weight := buffer.LevelWeightMs(ratelimit.Of(q).AgingMs)
		if _, ok := fair[q.Name]; ok {
			n, err := d.readdGrouped(ctx, q.Name, byQueue[q.Name], weight)
			total += n
			if err != nil {
				return total, err
			}
			continue
		}
		if tasks := lost[q.Name]; len(tasks) > 0 {
			if err := d.buf.Add(ctx, q.Name, tasks, weight); err != nil {
				return total, err
			}
			total += len(tasks)
		}
	}
	return total, nil
}

// readdGrouped adds those of tasks of fair queue that their group's buffer lacks.
func (d *Dispatcher) readdGrouped(ctx context.Context, queue string, tasks []storage.BufferedTask, weight int64) (int, error) {
	slots := make([]buffer.GroupSlot, len(tasks))
	byID := make(map[uuid.UUID]storage.Buffered, len(tasks))
	for i, t := range tasks {
		slots[i] = buffer.GroupSlot{Group: t.Group, ID: t.ID}
		byID[t.ID] = t.Buffered
	}
	missing, err := d.buf.MissingOfGrouped(ctx, queue, slots)
	if err != nil || len(missing) == 0 {
		return 0, err
	}
	add := make([]buffer.GroupedTask, len(missing))
	for i, m := range missing {
		add[i] = buffer.GroupedTask{Group: m.Group, Buffered: byID[m.ID]}
	}
	if err := d.buf.AddGrouped(ctx, queue, add, weight); err != nil {
		return 0, err
	}
	return len(add), nil
}
