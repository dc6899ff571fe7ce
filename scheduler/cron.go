package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // IANA zones even on hosts without a zoneinfo database

	"github.com/robfig/cron/v3"

	"github.com/taskforge/taskforge/storage"
)

// parser reads the cron forms of the contract: five fields, six with a leading
// seconds field, the @yearly … @hourly descriptors and @every <duration>.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom |
	cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed schedule: its cron expression in its time zone.
type Spec struct {
	sched cron.Schedule
	loc   *time.Location
	every time.Duration // set for @every: ticks are a constant delay apart
}

// ErrNeverFires is returned for a cron expression that matches no time within five years
// (e.g. February 30).
var ErrNeverFires = errors.New("cron expression never fires")

// Parse validates a cron expression and an IANA time zone ("" means UTC) and returns
// the schedule they describe. Its errors are fit to show to a caller.
func Parse(expr, tz string) (Spec, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return Spec{}, errors.New("cron is required")
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return Spec{}, errors.New("cron must not carry a time zone; use the timezone field")
	}
	if tz == "" {
		tz = "UTC"
	}
	if tz == "Local" {
		return Spec{}, errors.New(`timezone must be an IANA time zone name such as "Europe/Berlin", not "Local"`)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return Spec{}, fmt.Errorf("unknown timezone %q", tz)
	}
	var every time.Duration
	if rest, ok := strings.CutPrefix(expr, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return Spec{}, fmt.Errorf("@every needs a Go duration such as 30s or 1h30m: %v", err)
		}
		if d < time.Second || d%time.Second != 0 {
			return Spec{}, fmt.Errorf("@every needs a whole number of seconds, at least 1s; got %s", d)
		}
		every = d
	}
	sched, err := parser.Parse(expr)
	if err != nil {
		return Spec{}, fmt.Errorf("bad cron expression %q: %v", expr, err)
	}
	s := Spec{sched: sched, loc: loc, every: every}
	if s.Next(time.Now()).IsZero() {
		return Spec{}, fmt.Errorf("%w: %q", ErrNeverFires, expr)
	}
	return s, nil
}

// Next returns the first tick of expr in time zone tz strictly after after, or an error
// when expr or tz is invalid. The zero time means no tick within five years.
func Next(expr, tz string, after time.Time) (time.Time, error) {
	s, err := Parse(expr, tz)
	if err != nil {
		return time.Time{}, err
	}
	return s.Next(after), nil
}

// Next returns the first tick strictly after after, in UTC; the zero time when there
// is none within five years. Across daylight-saving changes a local time that does not
// exist that day is skipped, and one that occurs twice fires once (at its first
// occurrence). @every ticks are a constant delay apart, whatever the zone.
func (s Spec) Next(after time.Time) time.Time {
	t := after.In(s.loc)
	if s.every > 0 {
		return t.Truncate(time.Second).Add(s.every).UTC()
	}
	for range 8000 { // each skip passes one candidate; a repeated hour of a per-second cron is 3,600
		t = s.sched.Next(t)
		if t.IsZero() {
			return t
		}
		if s.exists(t) && !s.repeated(t) {
			return t.UTC()
		}
	}
	return time.Time{}
}

// exists reports whether t's wall clock is one the expression names: the library moves
// a time that a spring-forward gap swallowed to after the gap, which the contract skips.
func (s Spec) exists(t time.Time) bool {
	spec, ok := s.sched.(*cron.SpecSchedule)
	if !ok {
		return true
	}
	return spec.Second&(1<<uint(t.Second())) != 0 &&
		spec.Minute&(1<<uint(t.Minute())) != 0 &&
		spec.Hour&(1<<uint(t.Hour())) != 0
}

// repeated reports whether t's wall clock already occurred shortly before (the second
// pass through an hour that a fall-back repeats).
func (s Spec) repeated(t time.Time) bool {
	y, mo, d := t.Date()
	h, mi, sec := t.Clock()
	for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		e := t.Add(-back).In(s.loc)
		ey, emo, ed := e.Date()
		eh, emi, esec := e.Clock()
		if ey == y && emo == mo && ed == d && eh == h && emi == mi && esec == sec {
			return true
		}
	}
	return false
}

// Plan is what firing a schedule at now does: enqueue the task of Tick, the most
// recent tick at or before now (missed ticks collapse into it), and wait for Next,
// the first tick after now.
type Plan struct {
	Tick, Next time.Time
}

// PlanFrom returns the plan for a schedule whose next tick was due at due, at now (due <= now).
// Next is zero when the expression fires no more.
func (s Spec) PlanFrom(due, now time.Time) Plan {
	latest := due
	if s.every > 0 {
		if now.After(due) {
			latest = due.Add(now.Sub(due) / s.every * s.every)
		}
		return Plan{Tick: latest.UTC(), Next: latest.Add(s.every).UTC()}
	}
	// Jump close to now first, so that a long outage of a frequent schedule costs a few
	// steps rather than one per missed tick.
	for _, w := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour} {
		if now.Sub(latest) <= w {
			break
		}
		if c := s.Next(now.Add(-w)); !c.IsZero() && !c.After(now) && c.After(latest) {
			latest = c
			break
		}
	}
	for {
		n := s.Next(latest)
		if n.IsZero() || n.After(now) {
			return Plan{Tick: latest.UTC(), Next: n}
		}
		latest = n
	}
}

// Reschedule sets sch.NextRunAt for a schedule created or changed at now: nil while
// paused, else its first tick after now (nil when it fires no more). It validates the
// cron expression and time zone.
func Reschedule(sch *storage.Schedule, now time.Time) error {
	spec, err := Parse(sch.Cron, sch.Timezone)
	if err != nil {
		return err
	}
	sch.NextRunAt = nil
	if !sch.Paused {
		if next := spec.Next(now); !next.IsZero() {
			sch.NextRunAt = &next
		}
	}
	return nil
}
