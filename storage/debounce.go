package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/sealer"
)

// ErrDebounceContended: an enqueue with a debounce key found the key's holder
// unreplaceable (and released it) debounceTries times in a row, each time after
// another enqueue of the key had taken it meanwhile. The caller may try again.
var ErrDebounceContended = errors.New("debounce key contended: try again")

// debounceTries bounds the runs of enqueue_debounced for one task. A run only fails
// to place the task when it released a holder that could no longer be replaced;
// the next run then inserts, unless a racing enqueue inserted first and that task
// too became unreplaceable in between.
const debounceTries = 4

// hasDebounce says whether any of tasks has a debounce key.
func hasDebounce(tasks []NewTask) bool {
	return slices.ContainsFunc(tasks, func(t NewTask) bool { return t.DebounceKey != nil })
}

// enqueueWithDebounce is EnqueueWith for a batch holding tasks with debounce keys.
// A lone task is one statement outside a transaction; a batch is one transaction,
// its tasks without a debounce key inserted as enqueueTx does, those with one
// placed one after another in input order (so a later task with the same key
// replaces an earlier one). opts.Buffered and opts.Refs are not applied: every
// task is pending, and returned whole.
func (s *Store) enqueueWithDebounce(ctx context.Context, queue string, tasks []NewTask, opts EnqueueOptions) ([]Enqueued, error) {
	if len(tasks) == 1 {
		e, err := s.placeDebounced(ctx, s.hot, queue, tasks[0], opts.Traceparent)
		if err != nil {
			return nil, err
		}
		return []Enqueued{e}, nil
	}
	out := make([]Enqueued, len(tasks))
	err := pgx.BeginFunc(ctx, s.hot, func(tx pgx.Tx) error {
		var plain []NewTask
		var at []int
		for i, t := range tasks {
			if t.DebounceKey == nil {
				plain = append(plain, t)
				at = append(at, i)
			}
		}
		if len(plain) > 0 {
			opts := EnqueueOptions{Traceparent: opts.Traceparent}
			inserted, err := s.enqueueTx(ctx, tx, queue, plain, opts, nil)
			if err != nil {
				return err
			}
			for j, e := range inserted {
				out[at[j]] = e
			}
		}
		for i, t := range tasks {
			if t.DebounceKey == nil {
				continue
			}
			e, err := s.placeDebounced(ctx, tx, queue, t, opts.Traceparent)
			if err != nil {
				return fmt.Errorf("task %d: %w", i, err)
			}
			out[i] = e
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A later task of the batch may have replaced an earlier one: each shows the
	// task as the batch left it.
	last := make(map[uuid.UUID]Task)
	for _, e := range out {
		if e.Task.DebounceKey != nil {
			last[e.Task.ID] = e.Task
		}
	}
	for i := range out {
		if t, ok := last[out[i].Task.ID]; ok && out[i].Task.DebounceKey != nil {
			out[i].Task = t
		}
	}
	return out, nil
}

// placeDebounced runs enqueue_debounced for t on q until it has inserted t or
// replaced the waiting holder of t's key (see the statement's header).
func (s *Store) placeDebounced(ctx context.Context, q querier, queue string, t NewTask, traceparent *string) (Enqueued, error) {
	payload, err := s.seal(queue, sealer.Payload, t.Payload)
	if err != nil {
		return Enqueued{}, err
	}
	for range debounceTries {
		rows, err := q.Query(ctx, enqueueDebounced, queue, DueChannel, t.ID, string(payload), int32(t.Priority),
			int32Ptr(t.MaxRetries), int32Ptr(t.TimeoutSeconds), *t.DebounceKey, t.DebounceMs, t.DebounceMaxMs,
			traceparent, s.now(), t.Group)
		if err != nil {
			return Enqueued{}, err
		}
		var got Task
		var outcome string
		n := 0
		for rows.Next() {
			if err := rows.Scan(append(taskFields(&got), &outcome)...); err != nil {
				rows.Close()
				return Enqueued{}, err
			}
			n++
		}
		if err := rows.Err(); err != nil {
			return Enqueued{}, err
		}
		if n == 0 {
			return Enqueued{}, ErrQueueNotFound
		}
		if err := s.open(&got); err != nil {
			return Enqueued{}, err
		}
		switch outcome {
		case "created":
			return Enqueued{Task: got, Created: true}, nil
		case "replaced":
			return Enqueued{Task: got, Replaced: true}, nil
		}
	}
	return Enqueued{}, fmt.Errorf("debounce key %q: %w", *t.DebounceKey, ErrDebounceContended)
}
