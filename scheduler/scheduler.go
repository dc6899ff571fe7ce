package scheduler

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Config tunes a Scheduler. Zero fields take the defaults.
type Config struct {
	// MaxWait is the longest pause between passes, which bounds how late a tick fires
	// when another replica created or changed the schedule. Defaults to 1s.
	MaxWait time.Duration
	// Telemetry receives fired ticks and the tasks' transitions; nil disables them.
	Telemetry *telemetry.Telemetry
	// OnFire, when set, hears of every tick fired, after its commit (tests wait on it
	// instead of sleeping). It runs on Run's goroutine.
	OnFire func(storage.Fired)
	// OnDue, when set, hears of the queue of every task fired, so the replica's own
	// dispatcher need not wait for its NOTIFY.
	OnDue func(queue string)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.MaxWait = cmp.Or(c.MaxWait, time.Second)
	return c
}

// maxFiresPerPass bounds one pass, so a stop request is heard between batches.
const maxFiresPerPass = 1000

// Scheduler fires due schedules. Create it with New; run it with Run.
type Scheduler struct {
	store  *storage.Store
	cfg    Config
	log    *slog.Logger
	signal chan struct{}
}

// New returns a Scheduler.
func New(store *storage.Store, cfg Config, log *slog.Logger) *Scheduler {
	return &Scheduler{store: store, cfg: cfg.WithDefaults(), log: log, signal: make(chan struct{}, 1)}
}

// Wake has Run look for due schedules at once and re-plan its sleep (a schedule was
// created, changed or resumed on this replica).
func (s *Scheduler) Wake() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// Run fires due schedules until ctx is done. It returns nil when ctx is cancelled.
func (s *Scheduler) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-s.signal:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		more := s.pass(ctx)
		wait := s.cfg.MaxWait
		if more {
			wait = 0
		} else if d, ok, err := s.store.NextScheduleIn(ctx); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("could not read the next schedule tick", "err", err)
			}
		} else if ok {
			wait = min(max(d, 0), s.cfg.MaxWait)
		}
		timer.Reset(wait)
	}
}

// pass fires due schedules until none is due, and reports whether it stopped at its
// bound with more perhaps due.
// A schedule that fails (its payload cannot be opened, PostgreSQL refuses its task)
// is skipped for the rest of the pass, so it does not hold up the others; it is
// tried again on the next pass.
func (s *Scheduler) pass(ctx context.Context) bool {
	var failed []string
	for range maxFiresPerPass {
		fired, ok, err := s.store.FireDueSchedule(ctx, plan, failed)
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			s.log.Error("schedule not fired", "schedule", fired.Schedule.Name, "err", err)
			if !ok || fired.Schedule.Name == "" {
				return false // no schedule to blame: PostgreSQL itself failed
			}
			failed = append(failed, fired.Schedule.Name)
			continue
		}
		if !ok {
			return false
		}
		s.report(fired)
	}
	return true
}

// plan is the storage.PlanFunc of every schedule: the tick to fire and the next one.
func plan(sch storage.Schedule, now time.Time) (time.Time, time.Time, error) {
	spec, err := Parse(sch.Cron, sch.Timezone)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	p := spec.PlanFrom(*sch.NextRunAt, now)
	return p.Tick, p.Next, nil
}

func (s *Scheduler) report(f storage.Fired) {
	if f.Created {
		s.cfg.Telemetry.ScheduleFired(f.Schedule.Name, f.At.Sub(f.Tick))
		s.cfg.Telemetry.Transition(telemetry.Transition{TaskID: f.Task.ID, Queue: f.Task.Queue, To: storage.StatusPending,
			Reason: "schedule " + f.Schedule.Name})
		if s.cfg.OnDue != nil {
			s.cfg.OnDue(f.Task.Queue)
		}
	} else {
		s.log.Warn("tick's idempotency key already taken; counted as fired", "schedule", f.Schedule.Name,
			"tick", f.Tick)
	}
	if s.cfg.OnFire != nil {
		s.cfg.OnFire(f)
	}
}
