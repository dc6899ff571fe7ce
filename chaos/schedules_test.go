package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// chaosSchedule is one schedule firing into the noop queue during the fault window.
type chaosSchedule struct {
	Name  string
	Cron  string
	Every time.Duration // the interval between two ticks

	First  time.Time // next_run_at when created: the first tick
	Paused time.Time // when the pause at the end of the window was answered
}

// newChaosSchedules are the run's schedules: @every and a six-field cron, at
// intervals long enough that a replica's scheduler is not starved out of a tick by
// the load of the run itself.
func newChaosSchedules() []*chaosSchedule {
	return []*chaosSchedule{
		{Name: "chaos-every-2s", Cron: "@every 2s", Every: 2 * time.Second},
		{Name: "chaos-cron-3s", Cron: "*/3 * * * * *", Every: 3 * time.Second},
	}
}

// createSchedules creates h.schedules through the API (before the fault window).
func (h *harness) createSchedules() {
	for _, s := range h.schedules {
		status, data, err := h.mustCall(http.MethodPost, "/schedules", map[string]any{"name": s.Name, "queue": queueNoop,
			"cron": s.Cron, "payload": map[string]any{"schedule": s.Name}, "max_retries": goodRetries}, 30*time.Second)
		if err != nil || status != http.StatusCreated {
			h.t.Fatalf("create schedule %s: %d %v %s", s.Name, status, err, data)
		}
		var got struct {
			NextRunAt time.Time `json:"next_run_at"`
		}
		if err := json.Unmarshal(data, &got); err != nil {
			h.t.Fatalf("schedule %s: %v", s.Name, err)
		}
		s.First = got.NextRunAt
	}
}

// pauseSchedules pauses h.schedules at the end of the fault window, so that the
// tasks they made can settle.
func (h *harness) pauseSchedules() {
	for _, s := range h.schedules {
		status, data, err := h.mustCall(http.MethodPatch, "/schedules/"+s.Name, map[string]any{"paused": true}, time.Minute)
		if err != nil || status != http.StatusOK {
			h.t.Errorf("pause schedule %s: %d %v %s", s.Name, status, err, data)
		}
		s.Paused = time.Now()
	}
}

// scheduleOutageSlack is how long after PostgreSQL is back, or a replica that
// crashed on its own is restarted, its schedulers may take to fire again: a failed
// pass, the pool's reconnection, the next pass a second later.
const scheduleOutageSlack = 3 * time.Second

// crashRestart bounds the time a replica that crashed on its own (a crash point)
// stays down: its supervisor starts it again after 100 ms, then it starts up.
const crashRestart = 3 * time.Second

// firingBlocked reports whether, at some moment from from to to, no scheduler could
// fire: PostgreSQL down (or just back), a replica cut off by a partition (it may be
// in the middle of a fire, holding the schedule's row, which every other scheduler
// skips until the partition heals; then the overdue ticks collapse into one), or
// every replica down.
func firingBlocked(events []event, from, to time.Time) bool {
	down := map[string][][2]time.Time{} // replica → its down intervals
	for _, e := range events {
		switch {
		case e.Kind == string(faultPGFast) || e.Kind == string(faultPGKill) || e.Kind == string(faultPartition):
			back := e.Back
			if back.IsZero() {
				back = to
			}
			if e.At.Before(to) && back.Add(scheduleOutageSlack).After(from) {
				return true
			}
		case e.Kind == string(faultReplicaKill):
			back := e.Back
			if back.IsZero() {
				back = to
			}
			down[e.Target] = append(down[e.Target], [2]time.Time{e.At, back.Add(scheduleOutageSlack)})
		case strings.HasPrefix(e.Kind, "crashpoint:"):
			down[e.Target] = append(down[e.Target], [2]time.Time{e.At, e.At.Add(crashRestart + scheduleOutageSlack)})
		}
	}
	for at := from; !at.After(to); at = at.Add(50 * time.Millisecond) {
		all := true
		for i := range numReplicas {
			isDown := false
			for _, iv := range down[fmt.Sprintf("r%d", i)] {
				if !at.Before(iv[0]) && at.Before(iv[1]) {
					isDown = true
					break
				}
			}
			if !isDown {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// verifySchedules checks the tasks h.schedules made, from PostgreSQL: each stands
// for a tick of its schedule (the tick its key names is on the schedule's grid, and a
// task never retried has it as scheduled_at), no tick has two
// tasks, every tick from the first to the pause has a task unless no scheduler could
// fire between it and the next tick (PostgreSQL down, or every replica), and every
// such task ended done.
func (h *harness) verifySchedules(tasks []dbTask, events []event, rep *report) {
	// A tick's task keeps the tick as scheduled_at until an attempt of it is lost and it
	// is retried later; its idempotency key names the tick for good.
	var doubled, offGrid, missed, notDone, unknown []string
	byName := map[string][]dbTask{}
	for _, t := range tasks {
		if t.Schedule == nil {
			continue
		}
		var tick time.Time
		var err error
		if t.Key == nil {
			err = fmt.Errorf("no idempotency key")
		} else {
			tick, err = time.Parse(time.RFC3339, strings.TrimPrefix(*t.Key, "schedule:"+*t.Schedule+":"))
		}
		if err != nil {
			offGrid = append(offGrid, fmt.Sprintf("%s %s: key names no tick: %v", *t.Schedule, t.ID, err))
			continue
		}
		if t.Attempts <= 1 && !t.Scheduled.Equal(tick) {
			offGrid = append(offGrid, fmt.Sprintf("%s %s: tick %s, scheduled_at %s, never retried", *t.Schedule, t.ID,
				tick.Format(time.StampMicro), t.Scheduled.Format(time.StampMicro)))
		}
		t.Scheduled = tick
		byName[*t.Schedule] = append(byName[*t.Schedule], t)
	}
	fired, collapsed := 0, 0
	for name := range byName {
		if !slices.ContainsFunc(h.schedules, func(s *chaosSchedule) bool { return s.Name == name }) {
			unknown = append(unknown, name)
		}
	}
	for _, s := range h.schedules {
		ts := byName[s.Name]
		slices.SortFunc(ts, func(a, b dbTask) int { return a.Scheduled.Compare(b.Scheduled) })
		have := map[int64]bool{} // ticks by Unix µs
		for i, t := range ts {
			fired++
			if t.Status != "done" {
				notDone = append(notDone, fmt.Sprintf("%s %s tick %s: %s", s.Name, t.ID, t.Scheduled.Format(time.StampMilli), t.Status))
			}
			if d := t.Scheduled.Sub(s.First); d < 0 || d%s.Every != 0 {
				offGrid = append(offGrid, fmt.Sprintf("%s %s at %s (first tick %s)", s.Name, t.ID,
					t.Scheduled.Format(time.StampMicro), s.First.Format(time.StampMicro)))
			}
			if i > 0 && t.Scheduled.Equal(ts[i-1].Scheduled) {
				doubled = append(doubled, fmt.Sprintf("%s tick %s: %s and %s", s.Name, t.Scheduled.Format(time.StampMicro), ts[i-1].ID, t.ID))
			}
			have[t.Scheduled.UnixMicro()] = true
		}
		// Ticks due a full interval before the pause must all be there.
		for m := s.First; !m.After(s.Paused.Add(-s.Every)); m = m.Add(s.Every) {
			if have[m.UnixMicro()] {
				continue
			}
			if firingBlocked(events, m, m.Add(s.Every)) {
				collapsed++
				continue
			}
			missed = append(missed, fmt.Sprintf("%s tick %s (+%.1fs)", s.Name, m.Format(time.StampMilli), m.Sub(h.start).Seconds()))
		}
	}
	rep.add("schedule ticks with more than one task", len(doubled), doubled)
	rep.add("schedule tasks off their schedule's ticks", len(offGrid), offGrid)
	rep.add("schedule ticks missed while PostgreSQL and a replica were up", len(missed), missed)
	rep.add("schedule tasks not done", len(notDone), notDone)
	rep.add("tasks of schedules the run did not create", len(unknown), unknown)
	rep.info("schedule ticks fired (two schedules)", fired)
	rep.info("schedule ticks collapsed during outages", collapsed)
}
