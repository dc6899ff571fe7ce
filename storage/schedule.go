package storage

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/sealer"
)

// Schedule fires one task into Queue per tick of Cron in Timezone. Its JSON form is
// the API's schedule object.
type Schedule struct {
	Name           string          `json:"name" db:"name"`
	Queue          string          `json:"queue" db:"queue"`
	Cron           string          `json:"cron" db:"cron"`
	Timezone       string          `json:"timezone" db:"timezone"`
	Payload        json.RawMessage `json:"payload" db:"payload"`
	Priority       int             `json:"priority" db:"priority"`
	MaxRetries     *int            `json:"max_retries" db:"max_retries"` // nil: the queue's default
	TimeoutSeconds *int            `json:"timeout_seconds" db:"timeout_seconds"`
	// Group is the group of the tasks its ticks create; nil = the unnamed group.
	Group  *string `json:"group" db:"group_key"`
	Paused bool    `json:"paused" db:"paused"`
	// NextRunAt is the next tick to fire; nil while paused or when the expression fires no more.
	NextRunAt  *time.Time `json:"next_run_at" db:"next_run_at"`
	LastRunAt  *time.Time `json:"last_run_at" db:"last_run_at"`
	LastTaskID *uuid.UUID `json:"last_task_id" db:"last_task_id"`
	CreatedAt  time.Time  `json:"created_at" db:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at" db:"updated_at"`
}

// lockedSchedule is a schedule row held by a transaction, with the database clock.
type lockedSchedule struct {
	Schedule
	Now time.Time `db:"db_now"`
}

// QueueHasSchedulesError is DeleteQueue's refusal while schedules target the queue.
type QueueHasSchedulesError struct {
	Queue     string
	Schedules []string // up to 20 of them
}

func (e *QueueHasSchedulesError) Error() string {
	return fmt.Sprintf("queue %s is the target of schedules %s; delete them or move them to another queue first",
		e.Queue, strings.Join(e.Schedules, ", "))
}

// Is makes errors.Is(err, ErrQueueNotEmpty) true.
func (e *QueueHasSchedulesError) Is(target error) bool { return target == ErrQueueNotEmpty }

// scheduleBinding binds a schedule's sealed payload to its name (which never changes,
// unlike its queue).
func scheduleBinding(name string) string { return "schedule:" + name }

func (s *Store) openSchedule(sch *Schedule) error {
	if s.sealer == nil || sch.Name == "" {
		return nil
	}
	p, err := s.sealer.Open(scheduleBinding(sch.Name), sealer.Payload, sch.Payload)
	if err != nil {
		return fmt.Errorf("schedule %s payload: %w", sch.Name, err)
	}
	sch.Payload = p
	return nil
}

// CreateSchedule stores sch (NextRunAt as the caller computed it). It returns
// ErrScheduleExists when the name is taken and ErrQueueNotFound when its queue is missing.
func (s *Store) CreateSchedule(ctx context.Context, sch Schedule) (Schedule, error) {
	payload, err := s.seal(scheduleBinding(sch.Name), sealer.Payload, sch.Payload)
	if err != nil {
		return Schedule{}, fmt.Errorf("create schedule %s: %w", sch.Name, err)
	}
	rows, err := s.pool.Query(ctx, insertSchedule, sch.Name, sch.Queue, sch.Cron, sch.Timezone, string(payload),
		sch.Priority, sch.MaxRetries, sch.TimeoutSeconds, sch.Paused, sch.NextRunAt, sch.Group)
	out, err := one[Schedule](rows, err, ErrScheduleExists)
	if err == nil {
		err = s.openSchedule(&out)
	}
	if err != nil {
		if isForeignKeyViolation(err) {
			err = ErrQueueNotFound
		}
		return Schedule{}, fmt.Errorf("create schedule %s: %w", sch.Name, err)
	}
	return out, nil
}

// GetSchedule returns the schedule called name, or ErrScheduleNotFound.
func (s *Store) GetSchedule(ctx context.Context, name string) (Schedule, error) {
	rows, err := s.pool.Query(ctx, getSchedule, name)
	sch, err := one[Schedule](rows, err, ErrScheduleNotFound)
	if err == nil {
		err = s.openSchedule(&sch)
	}
	if err != nil {
		return Schedule{}, fmt.Errorf("get schedule %s: %w", name, err)
	}
	return sch, nil
}

// ListSchedules returns the schedules by name, of queue only when it is not empty.
func (s *Store) ListSchedules(ctx context.Context, queue string) ([]Schedule, error) {
	rows, err := s.pool.Query(ctx, listSchedules, optional(queue))
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Schedule])
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	for i := range out {
		if err := s.openSchedule(&out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// UpdateSchedule locks the schedule, lets change modify it (now is the database
// clock, to recompute NextRunAt from), and stores every field but the name, in one
// transaction. change may return an error to abort. A scheduler firing the schedule
// at the same moment finishes first, or waits and fires the changed schedule.
func (s *Store) UpdateSchedule(ctx context.Context, name string, change func(sch *Schedule, now time.Time) error) (Schedule, error) {
	var out Schedule
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, lockSchedule, name)
		cur, err := one[lockedSchedule](rows, err, ErrScheduleNotFound)
		if err != nil {
			return err
		}
		if err := s.openSchedule(&cur.Schedule); err != nil {
			return err
		}
		sch := cur.Schedule
		if err := change(&sch, cur.Now); err != nil {
			return err
		}
		payload, err := s.seal(scheduleBinding(name), sealer.Payload, sch.Payload)
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, updateSchedule, name, sch.Queue, sch.Cron, sch.Timezone, string(payload),
			sch.Priority, sch.MaxRetries, sch.TimeoutSeconds, sch.Paused, sch.NextRunAt, sch.Group)
		if out, err = one[Schedule](rows, err, ErrScheduleNotFound); err != nil {
			return err
		}
		return s.openSchedule(&out)
	})
	if err != nil {
		if isForeignKeyViolation(err) {
			err = ErrQueueNotFound
		}
		return Schedule{}, fmt.Errorf("update schedule %s: %w", name, err)
	}
	return out, nil
}

// DeleteSchedule deletes a schedule; the tasks it created stay.
func (s *Store) DeleteSchedule(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, deleteSchedule, name)
	if err == nil && tag.RowsAffected() == 0 {
		err = ErrScheduleNotFound
	}
	if err != nil {
		return fmt.Errorf("delete schedule %s: %w", name, err)
	}
	return nil
}

// Fired is one tick a scheduler fired.
type Fired struct {
	Schedule Schedule // as it is after the fire
	Task     Task     // the tick's task; zero when Created is false and the key held another request
	// Created is false when the tick's idempotency key was already taken (the tick
	// had fired before, e.g. by a schedule of the same name since deleted).
	Created bool
	Tick    time.Time // the tick the task stands for (its scheduled_at)
	At      time.Time // the database clock when it fired
}

// TickKey is the idempotency key of the task of schedule name's tick.
func TickKey(name string, tick time.Time) string {
	return "schedule:" + name + ":" + tick.UTC().Format(time.RFC3339)
}

// PlanFunc says, for a due schedule at now (the database clock), which tick to fire
// and which comes next (zero: none).
type PlanFunc func(sch Schedule, now time.Time) (tick, next time.Time, err error)

// FireDueSchedule fires the most overdue unpaused schedule that no other scheduler
// holds, and reports ok false when none is due. In one transaction it locks the
// schedule (FOR UPDATE SKIP LOCKED), inserts the task of the tick plan names (through
// the enqueue path, with scheduled_at the tick and an idempotency key derived from
// the schedule and the tick), records it as the last run and advances next_run_at,
// so a tick fires exactly once whatever the number of schedulers and their crashes.
// When plan fails the schedule stops (next_run_at NULL) rather than fail forever.
// Schedules named in skip are passed over. When firing the schedule it claimed fails,
// ok is true and the returned Fired names it (Schedule.Name), so that the caller can
// skip it for the rest of its pass rather than let it hold up the others.
func (s *Store) FireDueSchedule(ctx context.Context, plan PlanFunc, skip []string) (Fired, bool, error) {
	var out Fired
	var found bool
	var planErr error
	if skip == nil {
		skip = []string{}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, claimDueSchedule, skip)
		cur, err := one[lockedSchedule](rows, err, nil)
		if err != nil || cur.Name == "" {
			return err
		}
		found = true
		out.Schedule.Name = cur.Name
		if err := s.openSchedule(&cur.Schedule); err != nil {
			return err
		}
		sch := cur.Schedule
		tick, next, err := plan(sch, cur.Now)
		if err != nil {
			planErr = fmt.Errorf("schedule %s stopped: %w", sch.Name, err)
			_, err = tx.Exec(ctx, scheduleFired, sch.Name, nil, sch.LastTaskID, sch.LastRunAt)
			return err
		}
		key := TickKey(sch.Name, tick)
		fp := sha256.Sum256([]byte(key))
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		tick = tick.UTC()
		nt := NewTask{ID: id, Payload: sch.Payload, Priority: sch.Priority, ScheduledAt: &tick,
			MaxRetries: sch.MaxRetries, TimeoutSeconds: sch.TimeoutSeconds, IdempotencyKey: &key, Fingerprint: fp[:],
			Group: sch.Group}
		enq, err := s.enqueueTx(ctx, tx, sch.Queue, []NewTask{nt}, EnqueueOptions{}, &sch.Name)
		lastTask, lastRun := sch.LastTaskID, sch.LastRunAt
		switch {
		case errors.Is(err, ErrIdempotencyConflict):
			// A task enqueued by hand holds the tick's key: the tick counts as fired.
		case err != nil:
			return err
		default:
			out.Task, out.Created = enq[0].Task, enq[0].Created
			lastTask, lastRun = &enq[0].Task.ID, &cur.Now
		}
		var nextAt *time.Time
		if !next.IsZero() {
			n := next.UTC()
			nextAt = &n
		}
		if _, err := tx.Exec(ctx, scheduleFired, sch.Name, nextAt, lastTask, lastRun); err != nil {
			return err
		}
		sch.NextRunAt, sch.LastTaskID, sch.LastRunAt = nextAt, lastTask, lastRun
		out.Schedule, out.Tick, out.At = sch, tick, cur.Now
		return nil
	})
	if err == nil {
		err = planErr
	}
	if err != nil {
		return Fired{Schedule: Schedule{Name: out.Schedule.Name}}, found, fmt.Errorf("fire due schedule %s: %w", out.Schedule.Name, err)
	}
	return out, found, nil
}

// TriggerSchedule enqueues the schedule's task now, outside its cadence: the next
// tick is unchanged; the task has no idempotency key.
func (s *Store) TriggerSchedule(ctx context.Context, name string) (Schedule, Task, error) {
	var sch Schedule
	var task Task
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, lockSchedule, name)
		cur, err := one[lockedSchedule](rows, err, ErrScheduleNotFound)
		if err != nil {
			return err
		}
		if err := s.openSchedule(&cur.Schedule); err != nil {
			return err
		}
		sch = cur.Schedule
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		nt := NewTask{ID: id, Payload: sch.Payload, Priority: sch.Priority,
			MaxRetries: sch.MaxRetries, TimeoutSeconds: sch.TimeoutSeconds, Group: sch.Group}
		enq, err := s.enqueueTx(ctx, tx, sch.Queue, []NewTask{nt}, EnqueueOptions{}, &sch.Name)
		if err != nil {
			return err
		}
		task = enq[0].Task
		_, err = tx.Exec(ctx, scheduleTriggered, name, task.ID)
		return err
	})
	if err != nil {
		return Schedule{}, Task{}, fmt.Errorf("trigger schedule %s: %w", name, err)
	}
	return sch, task, nil
}

// NextScheduleIn is how long until the earliest unpaused tick (zero or less: one is
// due); ok is false when no schedule waits.
func (s *Store) NextScheduleIn(ctx context.Context) (d time.Duration, ok bool, err error) {
	var secs *float64
	if err := s.pool.QueryRow(ctx, nextScheduleIn).Scan(&secs); err != nil {
		return 0, false, fmt.Errorf("next schedule tick: %w", err)
	}
	if secs == nil {
		return 0, false, nil
	}
	return time.Duration(*secs * float64(time.Second)), true, nil
}

// schedulesTargeting returns an error naming the schedules that target queue, if any.
func schedulesTargeting(ctx context.Context, tx pgx.Tx, queue string) error {
	rows, err := tx.Query(ctx, schedulesOfQueue, queue)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(names) > 0 {
		return &QueueHasSchedulesError{Queue: queue, Schedules: names}
	}
	return nil
}

// ResealSchedules re-encrypts, with the current key, every schedule payload that is
// plain or sealed with another key, in one transaction, and returns how many it
// changed. Schedules locked by a firing are skipped: run it again to catch them.
func (s *Store) ResealSchedules(ctx context.Context) (int, error) {
	if s.sealer == nil {
		return 0, errors.New("reseal schedules: no encryption keys configured")
	}
	changed := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, unsealedSchedules, "v1."+s.sealer.CurrentKey()+".")
		if err != nil {
			return err
		}
		type row struct {
			Name    string          `db:"name"`
			Payload json.RawMessage `db:"payload"`
		}
		found, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
		if err != nil {
			return err
		}
		for _, r := range found {
			sch := Schedule{Name: r.Name, Payload: r.Payload}
			if err := s.openSchedule(&sch); err != nil {
				return err
			}
			sealed, err := s.seal(scheduleBinding(r.Name), sealer.Payload, sch.Payload)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, resealSchedule, r.Name, string(sealed)); err != nil {
				return err
			}
			changed++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("reseal schedules: %w", err)
	}
	return changed, nil
}
