package scheduler

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/taskforge/taskforge/storage"
)

// Config tunes a Scheduler. Zero fields take the defaults.
type Config struct {
	// MaxWait is the longest pause between passes, which bounds how late a tick fires
	// when another replica created or changed the schedule. Defaults to 1s.
	MaxWait time.Duration
}

// Firer fires due ticks; *lifecycle.Lifecycle is one. The transition is the
// Firer's, end to end (the statement, the dispatcher's wake-up, telemetry), so a
// fired tick has the follow-ups of a manual trigger; the Scheduler only decides
// when to ask and plans the ticks (plan).
type Firer interface {
	// FireDueSchedule fires the most overdue unpaused schedule not in skip, with
	// every follow-up, and reports ok false when none is due (see
	// storage.FireDueSchedule for what it returns on failure).
	FireDueSchedule(ctx context.Context, plan storage.PlanFunc, skip []string) (f storage.Fired, ok bool, err error)
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
	firer  Firer
	cfg    Config
	log    *slog.Logger
	signal chan struct{}
}

// New returns a Scheduler that reads the next tick from store and fires ticks
// through firer.
func New(store *storage.Store, firer Firer, cfg Config, log *slog.Logger) *Scheduler {
	return &Scheduler{store: store, firer: firer, cfg: cfg.WithDefaults(), log: log, signal: make(chan struct{}, 1)}
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
		fired, ok, err := s.firer.FireDueSchedule(ctx, plan, failed)
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
