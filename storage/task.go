package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/sealer"
)

// Enqueue inserts tasks into queue, all or nothing, and wakes the dispatchers. Every task records traceparent (the enqueue's trace context), if any. A task whose idempotency key the queue already holds is not inserted:
// when the stored fingerprint matches, the stored task is returned with Created
// false; otherwise the whole batch fails with an *IdempotencyConflictError. A task
// with a debounce key replaces the queue's task holding that key while that one is
// pending, never attempted and not yet due (Replaced: the same id, the new payload,
// priority, budget and due time, Debounced + 1); otherwise it is inserted, due
// DebounceMs from now.
func (s *Store) Enqueue(ctx context.Context, queue string, tasks []NewTask, traceparent *string) ([]Enqueued, error) {
	return s.EnqueueWith(ctx, queue, tasks, EnqueueOptions{Traceparent: traceparent})
}

// EnqueueOptions are an enqueue's choices beyond its queue and tasks.
type EnqueueOptions struct {
	// Traceparent is recorded on every task: the enqueue's trace context, if any.
	Traceparent *string
	// Buffered inserts the tasks without a ScheduledAt as dispatched
	// (StatusBuffered), as a dispatch pass would leave them, saving their dispatch
	// commit, when the queue is not paused and holds no due task the dispatcher has
	// yet to move. The caller mirrors those into the buffer (buffer.Add); should it
	// not, the dispatcher's repair pass re-adds them, as after any lost ZADD. Other
	// tasks are pending, and announced to the dispatchers.
	Buffered bool
	// Refs returns of each task inserted only what mirroring it into the buffer
	// needs: its ID, Queue, Status, Priority, ScheduledAt, Traceparent and Group, the other
	// fields left zero. A task matched by its idempotency key is returned whole. For
	// callers that answer with ids (enqueue_task_refs; its header gives the figure
	// that keeps it).
	Refs bool
}

// EnqueueWith is Enqueue with opts: Enqueue is EnqueueWith with only a Traceparent.
func (s *Store) EnqueueWith(ctx context.Context, queue string, tasks []NewTask, opts EnqueueOptions) ([]Enqueued, error) {
	var out []Enqueued
	var err error
	switch {
	case hasDebounce(tasks):
		out, err = s.enqueueWithDebounce(ctx, queue, tasks, opts)
	case slices.ContainsFunc(tasks, func(t NewTask) bool { return t.IdempotencyKey != nil }):
		// A key already taken is matched against its holder in the same transaction,
		// so that a conflict fails the whole batch.
		err = pgx.BeginFunc(ctx, s.hot, func(tx pgx.Tx) error {
			out, err = s.enqueueTx(ctx, tx, queue, tasks, opts, nil)
			return err
		})
	default:
		// Without keys every task is inserted or none is: the statement alone is the
		// transaction, one round trip with its commit.
		out, err = s.insertTasks(ctx, s.hot, queue, tasks, opts, nil)
	}
	if err != nil {
		if isForeignKeyViolation(err) { // the queue was deleted under us
			err = ErrQueueNotFound
		}
		return nil, fmt.Errorf("enqueue into %s: %w", queue, err)
	}
	return out, nil
}

// querier runs a statement on the pool (its own transaction) or within a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// enqueueTx is EnqueueWith within tx, for tasks that schedule (nil: none) fired. It
// seals payloads, reserves idempotency keys and wakes the dispatchers as Enqueue
// does.
func (s *Store) enqueueTx(ctx context.Context, tx pgx.Tx, queue string, tasks []NewTask, opts EnqueueOptions, schedule *string) ([]Enqueued, error) {
	out, err := s.insertTasks(ctx, tx, queue, tasks, opts, schedule)
	if err != nil {
		return nil, err
	}
	missingKeys := skippedKeys(tasks, out)
	if len(missingKeys) > 0 {
		if out, err = s.retakeExpiredKeys(ctx, tx, queue, tasks, missingKeys, out, opts, schedule); err != nil {
			return nil, err
		}
		missingKeys = skippedKeys(tasks, out)
	}
	if len(missingKeys) > 0 {
		if err := s.matchExisting(ctx, tx, queue, tasks, missingKeys, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// insertTasks runs enqueueTasks (or enqueueTaskRefs) on q and returns the tasks it
// inserted, in input order; a task skipped for its idempotency key is left zero, for
// the caller to match (enqueueTx). It fails with ErrQueueNotFound when there is no
// such queue and a task without a key shows it.
func (s *Store) insertTasks(ctx context.Context, q querier, queue string, tasks []NewTask, opts EnqueueOptions, schedule *string) ([]Enqueued, error) {
	n := len(tasks)
	ids := make([]uuid.UUID, n)
	payloads := make([]string, n)
	priorities := make([]int32, n)
	for i, t := range tasks {
		ids[i] = t.ID
		payload, err := s.seal(queue, sealer.Payload, t.Payload)
		if err != nil {
			return nil, err
		}
		payloads[i] = string(payload)
		priorities[i] = int32(t.Priority)
	}
	// The optional columns go as NULL when no task sets them (a bulk load's usual
	// case): unnest pads a NULL array with NULLs, and pgx encodes arrays of
	// pointers element by element, through reflection.
	schedules := nullableColumn(tasks, func(t NewTask) *time.Time { return t.ScheduledAt })
	retries := nullableColumn(tasks, func(t NewTask) *int32 { return int32Ptr(t.MaxRetries) })
	timeouts := nullableColumn(tasks, func(t NewTask) *int32 { return int32Ptr(t.TimeoutSeconds) })
	keys := nullableColumn(tasks, func(t NewTask) *string { return t.IdempotencyKey })
	groups := nullableColumn(tasks, func(t NewTask) *string { return t.Group })
	var fingerprints [][]byte
	if keys != nil {
		fingerprints = make([][]byte, n)
		for i, t := range tasks {
			fingerprints[i] = t.Fingerprint
		}
	}
	statement := enqueueTasks
	if opts.Refs {
		statement = enqueueTaskRefs
	}
	rows, err := q.Query(ctx, statement, queue, DueChannel, ids, payloads, priorities,
		schedules, retries, timeouts, keys, fingerprints, opts.Traceparent, schedule, opts.Buffered, groups)
	if err != nil {
		return nil, err
	}
	out := make([]Enqueued, n)
	at := make(map[uuid.UUID]int, n) // each task's place in the input
	for i, t := range tasks {
		at[t.ID] = i
	}
	inserted := 0
	// slot is where the row of task id goes: its Enqueued, marked created.
	slot := func(id uuid.UUID) (*Enqueued, error) {
		i, ok := at[id]
		if !ok {
			return nil, fmt.Errorf("the enqueue returned task %s, which it was not given", id)
		}
		inserted++
		out[i].Created = true
		return &out[i], nil
	}
	if opts.Refs {
		err = scanTaskRefs(rows, queue, opts.Traceparent, slot)
	} else {
		var whole []Task
		if whole, err = s.collectTasks(rows); err == nil {
			for i := range whole {
				var e *Enqueued
				if e, err = slot(whole[i].ID); err != nil {
					break
				}
				e.Task = whole[i]
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if inserted == 0 && slices.ContainsFunc(tasks, func(t NewTask) bool { return t.IdempotencyKey == nil }) {
		// A task without a key is inserted whenever the queue exists. (When every task
		// has a key and none went in, matchExisting tells a missing queue apart.)
		return nil, ErrQueueNotFound
	}
	for i, t := range tasks {
		if !out[i].Created && t.IdempotencyKey == nil {
			return nil, fmt.Errorf("task %d was not inserted", i)
		}
	}
	return out, nil
}

// scanTaskRefs reads each row of rows (taskRefColumns of tasks in queue, inserted
// with traceparent) into the task of the Enqueued that slot gives for its id. A row
// is written field by field where it belongs: building a whole Task (about 400
// bytes) per row and copying it into the answer, as this did before, was an eighth
// of serve's CPU in a preload of 1,000-task batches; and the id is read as its 16
// bytes, where uuid.UUID's sql.Scanner took it as text and parsed it back.
func scanTaskRefs(rows pgx.Rows, queue string, traceparent *string, slot func(uuid.UUID) (*Enqueued, error)) error {
	defer rows.Close()
	var (
		id          uuid.UUID
		status      string
		priority    int
		scheduledAt time.Time
		group       *string
	)
	for rows.Next() {
		if err := rows.Scan((*[16]byte)(&id), &status, &priority, &scheduledAt, &group); err != nil {
			return err
		}
		e, err := slot(id)
		if err != nil {
			return err
		}
		t := &e.Task
		t.ID, t.Queue, t.Status, t.Priority, t.ScheduledAt, t.Traceparent, t.Group =
			id, queue, status, priority, scheduledAt, traceparent, group
	}
	return rows.Err()
}

// nullableColumn is the column of field over tasks, or nil (SQL NULL) when no task
// sets it.
func nullableColumn[T any](tasks []NewTask, field func(NewTask) *T) []*T {
	if !slices.ContainsFunc(tasks, func(t NewTask) bool { return field(t) != nil }) {
		return nil
	}
	col := make([]*T, len(tasks))
	for i, t := range tasks {
		col[i] = field(t)
	}
	return col
}

// matchExisting fills out[i] for tasks whose idempotency key was already taken,
// checking that the earlier request had the same fingerprint. It fails with
// ErrQueueNotFound when no holder is found because there is no such queue.
func (s *Store) matchExisting(ctx context.Context, tx pgx.Tx, queue string, tasks []NewTask, keys []string, out []Enqueued) error {
	rows, err := tx.Query(ctx, tasksByIdempotencyKey, queue, keys)
	if err != nil {
		return err
	}
	existing, err := s.collectTasks(rows)
	if err != nil {
		return err
	}
	byKey := make(map[string]Task, len(existing))
	for _, t := range existing {
		byKey[*t.IdempotencyKey] = t
	}
	var reserved map[string]uuid.UUID // keys whose task is gone, within their window
	if len(byKey) < len(keys) {
		if reserved, err = reservations(ctx, tx, queue, keys); err != nil {
			return err
		}
	}
	for i, t := range tasks {
		if out[i].Task.ID != uuid.Nil || t.IdempotencyKey == nil {
			continue
		}
		prev, ok := byKey[*t.IdempotencyKey]
		if !ok {
			if id, held := reserved[*t.IdempotencyKey]; held {
				return &DuplicateRequestError{Index: i, Key: *t.IdempotencyKey, TaskID: id}
			}
			var exists bool
			if err := tx.QueryRow(ctx, queueExists, queue).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return ErrQueueNotFound
			}
			// The holder of the key was deleted between our insert and this read; the
			// caller may simply try again.
			return fmt.Errorf("idempotency key %q: holder vanished, retry", *t.IdempotencyKey)
		}
		if !bytes.Equal(prev.Fingerprint, t.Fingerprint) {
			return &IdempotencyConflictError{Index: i, Key: *t.IdempotencyKey}
		}
		out[i] = Enqueued{Task: prev, Created: prev.ID == t.ID}
	}
	return nil
}

func int32Ptr(v *int) *int32 {
	if v == nil {
		return nil
	}
	n := int32(*v)
	return &n
}

// GetTask returns a task of queue with its attempt history.
func (s *Store) GetTask(ctx context.Context, queue string, id uuid.UUID) (Task, []Attempt, error) {
	rows, err := s.pool.Query(ctx, getTask, queue, id)
	t, err := one[Task](rows, err, nil)
	if err == nil {
		err = s.open(&t)
	}
	if err == nil && t.ID == uuid.Nil {
		err = s.queueOrTaskNotFound(ctx, queue)
	}
	if err != nil {
		return Task{}, nil, fmt.Errorf("get task %s: %w", id, err)
	}
	attempts, err := s.Attempts(ctx, id)
	if err != nil {
		return Task{}, nil, err
	}
	return t, attempts, nil
}

// Attempts returns a task's attempts in order.
func (s *Store) Attempts(ctx context.Context, id uuid.UUID) ([]Attempt, error) {
	rows, err := s.pool.Query(ctx, taskAttempts, id)
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", id, err)
	}
	attempts, err := pgx.CollectRows(rows, pgx.RowToStructByName[Attempt])
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", id, err)
	}
	for i := range attempts {
		if err := s.openError(id, attempts[i].Error); err != nil {
			return nil, fmt.Errorf("attempt %d of %s: error text: %w", attempts[i].Attempt, id, err)
		}
	}
	return attempts, nil
}

// ListTasks returns up to f.Limit tasks newest first, and the cursor of the next
// page (nil on the last page).
func (s *Store) ListTasks(ctx context.Context, f TaskFilter) ([]Task, *Cursor, error) {
	after, afterID := cursorArgs(f.After)
	statuses := Statuses
	if f.Status != "" {
		statuses = []string{f.Status}
	}
	args := []any{f.Queue, statuses, optional(f.WorkerID), f.CreatedAfter, f.CreatedBefore, after, afterID, f.Limit + 1}
	statement := listTasks
	if f.Group != "" {
		statement, args = listGroupTasks, append(args, f.Group)
	}
	rows, err := s.pool.Query(ctx, statement, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("list tasks of %s: %w", f.Queue, err)
	}
	tasks, err := s.collectTasks(rows)
	if err != nil {
		return nil, nil, fmt.Errorf("list tasks of %s: %w", f.Queue, err)
	}
	var next *Cursor
	if len(tasks) > f.Limit {
		tasks = tasks[:f.Limit]
		last := tasks[len(tasks)-1]
		next = &Cursor{Time: last.CreatedAt, ID: last.ID}
	}
	return tasks, next, nil
}

// Cancelled is the outcome of CancelTask.
type Cancelled struct {
	Task
	FromStatus string `json:"-" db:"from_status"` // the status it had
}

// cancelledRow is a row of cancelTask: the outcome and its Effects.
type cancelledRow struct {
	Cancelled
	WFEffects *StepEffects `db:"wf_effects"`
}

// CancelTask cancels a waiting task at once, or asks the worker running it to stop
// (CancelRequested). It returns ErrTaskNotCancellable for a finished task.
func (s *Store) CancelTask(ctx context.Context, queue string, id uuid.UUID) (Cancelled, error) {
	rows, err := s.pool.Query(ctx, cancelTask, queue, id)
	row, err := one[cancelledRow](rows, err, nil)
	t := row.Cancelled
	t.Effects = row.WFEffects
	if err == nil {
		err = s.open(&t.Task)
	}
	if err == nil && t.ID == uuid.Nil {
		var status string
		err = s.pool.QueryRow(ctx, taskStatus, queue, id).Scan(&status)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = s.queueOrTaskNotFound(ctx, queue)
		case err == nil:
			err = ErrTaskNotCancellable
		}
	}
	if err != nil {
		return Cancelled{}, fmt.Errorf("cancel task %s: %w", id, err)
	}
	return t, nil
}

// ListDead returns up to limit dead tasks of queue, most recently died first, and the
// cursor of the next page.
func (s *Store) ListDead(ctx context.Context, queue string, limit int, after *Cursor) ([]Task, *Cursor, error) {
	at, atID := cursorArgs(after)
	rows, err := s.pool.Query(ctx, listDead, queue, at, atID, limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list dead tasks of %s: %w", queue, err)
	}
	tasks, err := s.collectTasks(rows)
	if err != nil {
		return nil, nil, fmt.Errorf("list dead tasks of %s: %w", queue, err)
	}
	var next *Cursor
	if len(tasks) > limit {
		tasks = tasks[:limit]
		last := tasks[len(tasks)-1]
		next = &Cursor{Time: *last.FinishedAt, ID: last.ID}
	}
	return tasks, next, nil
}

// Replay creates a new pending task from each dead task given (or from every dead
// task of the queue when all is set), in one transaction. The dead step of a failed
// workflow resumes its workflow instead (its new task takes the step's place, and
// every step not done gets a new task). The dead tasks keep their
// history and gain ReplayedAt and ReplayCount+1. It returns ErrTaskNotFound, and
// replays nothing, when any id is not a dead task of queue.
func (s *Store) Replay(ctx context.Context, queue string, ids []uuid.UUID, all bool) ([]Task, error) {
	var out []Task
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, queueExists, queue).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return ErrQueueNotFound
		}
		rows, err := tx.Query(ctx, lockDead, queue, ids, all)
		if err != nil {
			return err
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		if !all {
			if len(locked) != len(dedupe(ids)) {
				return ErrTaskNotFound
			}
			locked = dedupe(ids) // keep the caller's order
		}
		if len(locked) == 0 {
			out = []Task{}
			return nil
		}
		// The dead steps of failed workflows resume their workflows; the rest are
		// replayed as plain tasks.
		rows, err = tx.Query(ctx, failedWorkflowSteps, locked)
		if err != nil {
			return err
		}
		steps, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		resumed := make(map[uuid.UUID]Task, len(steps))
		for _, id := range steps {
			t, ok, err := s.resumeTx(ctx, tx, id)
			if err != nil {
				return fmt.Errorf("resume the workflow of task %s: %w", id, err)
			}
			if ok {
				resumed[id] = t
			}
		}
		plain := make([]uuid.UUID, 0, len(locked)-len(resumed))
		for _, id := range locked {
			if _, ok := resumed[id]; !ok {
				plain = append(plain, id)
			}
		}
		replays := make(map[uuid.UUID]Task, len(plain))
		if len(plain) > 0 {
			rows, err = tx.Query(ctx, replayDead, plain)
			if err != nil {
				return err
			}
			tasks, err := s.collectTasks(rows)
			if err != nil {
				return err
			}
			for _, t := range tasks {
				replays[*t.ReplayedFrom] = t
			}
			if _, err := tx.Exec(ctx, notifyDue, DueChannel, queue); err != nil {
				return err
			}
		}
		out = make([]Task, 0, len(locked))
		for _, id := range locked {
			if t, ok := resumed[id]; ok {
				out = append(out, t)
			} else {
				out = append(out, replays[id])
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("replay dead tasks of %s: %w", queue, err)
	}
	return out, nil
}

func dedupe(ids []uuid.UUID) []uuid.UUID {
	seen := make(map[uuid.UUID]bool, len(ids))
	out := make([]uuid.UUID, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// DiscardDead deletes a dead task and its attempts.
func (s *Store) DiscardDead(ctx context.Context, queue string, id uuid.UUID) error {
	tag, err := s.pool.Exec(ctx, discardDead, queue, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = s.queueOrTaskNotFound(ctx, queue)
	}
	if err != nil {
		return fmt.Errorf("discard dead task %s: %w", id, err)
	}
	return nil
}
