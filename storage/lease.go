package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/sealer"
)

// DispatchDue moves up to limit due pending or retry tasks of queue to buffered, best
// first, and returns them for mirroring into the buffer. Each priority level below
// the first weighs levelWeightMs of eligible time (see buffer.LevelWeightMs).
func (s *Store) DispatchDue(ctx context.Context, queue string, limit int, levelWeightMs int64) ([]Buffered, error) {
	rows, err := s.pool.Query(ctx, dispatchDue, queue, limit, float64(levelWeightMs), s.now())
	if err != nil {
		return nil, fmt.Errorf("dispatch %s: %w", queue, err)
	}
	out, err := appendByPosition(nil, rows, bufferedColumnNames, appendBufferedFields)
	if err != nil {
		return nil, fmt.Errorf("dispatch %s: %w", queue, err)
	}
	return out, nil
}

// NextDue returns how long until the earliest waiting task (scheduled, or in retry
// backoff) due after the given database time becomes due (negative when it is due
// already), and false when none waits.
func (s *Store) NextDue(ctx context.Context, after time.Time) (time.Duration, bool, error) {
	var wait *float64
	if err := s.pool.QueryRow(ctx, nextDue, after).Scan(&wait); err != nil {
		return 0, false, fmt.Errorf("next due task: %w", err)
	}
	if wait == nil {
		return 0, false, nil
	}
	return time.Duration(*wait * float64(time.Second)), true, nil
}

// ClaimItem asks for one buffered task on behalf of one worker.
type ClaimItem struct {
	TaskID   uuid.UUID
	WorkerID string
}

// ClaimMany claims, in one statement, every item whose task is still claimable, for
// the item's worker, with a lease of the given length. It returns the claimed tasks
// by id (ClaimedBy says for which worker); an id asked for twice is claimed once.
func (s *Store) ClaimMany(ctx context.Context, items []ClaimItem, lease time.Duration) (map[uuid.UUID]Task, error) {
	rows, err := s.hot.Query(ctx, claimTasks, claimArgs(items, lease, s.now())...)
	return byID(rows, err, s.appendTasks, "claim", len(items))
}

// claimArgs are the parameters of claim_tasks for items.
func claimArgs(items []ClaimItem, lease time.Duration, now *time.Time) []any {
	ids := make([]uuid.UUID, len(items))
	workers := make([]string, len(items))
	for i, it := range items {
		ids[i], workers[i] = it.TaskID, it.WorkerID
	}
	return []any{ids, workers, ms(lease), now}
}

// Heartbeat extends the lease workerID holds on a task, never past the attempt's
// deadline. It returns ErrLeaseLost, changing nothing, unless token is the task's
// current, unexpired lease.
func (s *Store) Heartbeat(ctx context.Context, workerID string, taskID, token uuid.UUID, lease time.Duration) (Lease, error) {
	return s.heartbeat(ctx, workerID, taskID, token, lease, false, nil)
}

// HeartbeatProgress is Heartbeat that also stores progress as the attempt's
// progress, sealed when encryption is on; an empty or JSON null progress clears it.
// Like Heartbeat, it changes nothing unless the lease is held.
func (s *Store) HeartbeatProgress(ctx context.Context, workerID string, taskID, token uuid.UUID, lease time.Duration, progress json.RawMessage) (Lease, error) {
	var stored *string
	if len(progress) > 0 && string(progress) != "null" {
		sealed, err := s.seal(taskID.String(), sealer.Progress, progress)
		if err != nil {
			return Lease{}, fmt.Errorf("heartbeat task %s: %w", taskID, err)
		}
		str := string(sealed)
		stored = &str
	}
	return s.heartbeat(ctx, workerID, taskID, token, lease, true, stored)
}

func (s *Store) heartbeat(ctx context.Context, workerID string, taskID, token uuid.UUID, lease time.Duration, setProgress bool, progress *string) (Lease, error) {
	var l Lease
	err := s.hot.QueryRow(ctx, heartbeatTask, taskID, token, workerID, ms(lease), setProgress, progress, s.now()).Scan(&l.ExpiresAt, &l.CancelRequested)
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrLeaseLost
	}
	if err != nil {
		return Lease{}, fmt.Errorf("heartbeat task %s: %w", taskID, err)
	}
	return l, nil
}

// RecordWorker notes that workerID is alive, and the queues it polls when given.
func (s *Store) RecordWorker(ctx context.Context, workerID string, queues []string) error {
	if queues == nil {
		queues = []string{}
	}
	if _, err := s.pool.Exec(ctx, upsertWorker, workerID, queues); err != nil {
		return fmt.Errorf("record worker %s: %w", workerID, err)
	}
	return nil
}

// Ack records that the current attempt succeeded and the task is done. It returns
// ErrLeaseLost, changing nothing, unless token is the current, unexpired lease.
func (s *Store) Ack(ctx context.Context, workerID string, taskID, token uuid.UUID, result json.RawMessage) (Task, error) {
	acked, err := s.AckMany(ctx, []AckItem{{TaskID: taskID, LeaseToken: token, WorkerID: workerID, Result: result}}, false)
	if err != nil {
		return Task{}, err
	}
	t, ok := acked[taskID]
	if !ok {
		return Task{}, fmt.Errorf("ack task %s: %w", taskID, ErrLeaseLost)
	}
	return t, nil
}

// AckItem is one ack of a batch.
type AckItem struct {
	TaskID     uuid.UUID
	LeaseToken uuid.UUID
	WorkerID   string
	Result     json.RawMessage
}

// AckMany acks a batch in one statement and returns the tasks it marked done, keyed
// by id. An item whose lease is not held changes nothing and has no entry.
//
// The batch picks the statement. When every lease token is a plain one
// (PlainLeaseToken: tasks outside a workflow) it is ack_plain_tasks, on the hot
// pool, without the workflow cascade; with refs, ack_plain_task_refs, which reads
// back of each task only its ID, Queue, Status, Attempts, LeaseToken,
// AttemptStartedAt, Traceparent, UpdatedAt and FinishedAt, the other fields left
// zero. Any other batch goes whole to ack_tasks, which acks any task and runs the
// workflow cascade. The two plain variants are kept for the figures their files'
// headers give.
func (s *Store) AckMany(ctx context.Context, items []AckItem, refs bool) (map[uuid.UUID]Task, error) {
	switch {
	case slices.ContainsFunc(items, func(it AckItem) bool { return !PlainLeaseToken(it.LeaseToken) }):
		return s.ack(ctx, s.pool, ackTasks, items, s.appendEnded)
	case refs:
		return s.ack(ctx, s.hot, ackPlainTaskRefs, items, appendAckRefs)
	}
	return s.ack(ctx, s.hot, ackPlainTasks, items, s.appendEnded)
}

// appendAckRefs appends the rows of ackPlainTaskRefs (ackRefColumns) to dst, each
// scanned in place (as appendByPosition does).
func appendAckRefs(dst []Task, rows pgx.Rows) ([]Task, error) {
	defer rows.Close()
	var ptrs []any
	for rows.Next() {
		dst = append(dst, Task{})
		t := &dst[len(dst)-1]
		ptrs = append(ptrs[:0], &t.ID, &t.Queue, &t.Status, &t.Attempts, &t.LeaseToken, &t.AttemptStartedAt,
			&t.Traceparent, &t.UpdatedAt, &t.FinishedAt, &t.Group)
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return dst, nil
}

// PlainLeaseToken reports whether token is the lease token of a claim of a task
// outside a workflow (a version 8 UUID; a workflow step's is of version 4, as is
// any token issued before version 0013 of the schema), so that its ack may go to
// the statement for such tasks (AckMany).
func PlainLeaseToken(token uuid.UUID) bool { return token.Version() == 8 }

// ack runs stmt, one of the ack statements, over items and reads its rows with
// collect.
func (s *Store) ack(ctx context.Context, q querier, stmt string, items []AckItem,
	collect func([]Task, pgx.Rows) ([]Task, error)) (map[uuid.UUID]Task, error) {
	args, err := s.ackArgs(items)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, stmt, args...)
	return byID(rows, err, collect, "ack", len(items))
}

// ackArgs are the parameters of the ack statements for items, results sealed.
func (s *Store) ackArgs(items []AckItem) ([]any, error) {
	ids := make([]uuid.UUID, len(items))
	tokens := make([]uuid.UUID, len(items))
	workers := make([]string, len(items))
	results := make([]*string, len(items))
	for i, it := range items {
		ids[i], tokens[i], workers[i] = it.TaskID, it.LeaseToken, it.WorkerID
		if len(it.Result) > 0 {
			sealed, err := s.seal(it.TaskID.String(), sealer.Result, it.Result)
			if err != nil {
				return nil, fmt.Errorf("ack task %s: %w", it.TaskID, err)
			}
			r := string(sealed)
			results[i] = &r
		}
	}
	return []any{ids, tokens, workers, results, s.now()}, nil
}

// byID reads the tasks of rows (the answer of a statement run over n items, what
// names it in errors) with collect, by id. collect appends to a slice with room for
// a row per item, so that it never grows.
func byID(rows pgx.Rows, err error, collect func([]Task, pgx.Rows) ([]Task, error), what string, n int) (map[uuid.UUID]Task, error) {
	if err != nil {
		return nil, fmt.Errorf("%s %d tasks: %w", what, n, err)
	}
	tasks, err := collect(make([]Task, 0, n), rows)
	if err != nil {
		return nil, fmt.Errorf("%s %d tasks: %w", what, n, err)
	}
	out := make(map[uuid.UUID]Task, len(tasks))
	for _, t := range tasks {
		out[t.ID] = t
	}
	return out, nil
}

// AckAndClaim commits acks, as AckMany with refs does, and claims, as ClaimMany
// does, in one transaction (one round trip, one commit): a poll that carries the
// acks of its worker's finished tasks and finds new work pays one commit, not two
// in series. Every ack must hold a PlainLeaseToken. Either both take effect or
// neither does.
func (s *Store) AckAndClaim(ctx context.Context, acks []AckItem, claims []ClaimItem, lease time.Duration) (acked, claimed map[uuid.UUID]Task, err error) {
	if slices.ContainsFunc(acks, func(it AckItem) bool { return !PlainLeaseToken(it.LeaseToken) }) {
		return nil, nil, fmt.Errorf("ack and claim: a workflow step's ack must go through AckMany")
	}
	ackArgs, err := s.ackArgs(acks)
	if err != nil {
		return nil, nil, err
	}
	var b pgx.Batch
	b.Queue(ackPlainTaskRefs, ackArgs...)
	b.Queue(claimTasks, claimArgs(claims, lease, s.now())...)
	// A batch without transaction statements runs in one implicit transaction.
	br := s.hot.SendBatch(ctx, &b)
	defer br.Close()
	rows, err := br.Query()
	if acked, err = byID(rows, err, appendAckRefs, "ack", len(acks)); err != nil {
		return nil, nil, err
	}
	rows, err = br.Query()
	if claimed, err = byID(rows, err, s.appendTasks, "claim", len(claims)); err != nil {
		return nil, nil, err
	}
	if err := br.Close(); err != nil {
		return nil, nil, fmt.Errorf("ack %d and claim %d tasks: %w", len(acks), len(claims), err)
	}
	return acked, claimed, nil
}

// Nack records that the current attempt failed. The task retries after the queue's
// backoff (or n.RetryAfterMs) while budget remains and the error is retryable; it is
// dead otherwise, and cancelled when a cancel was requested. It returns ErrLeaseLost,
// changing nothing, unless the token is the current, unexpired lease.
func (s *Store) Nack(ctx context.Context, n Nack) (Task, error) {
	var retryAfter *float64
	if n.RetryAfterMs != nil {
		v := float64(*n.RetryAfterMs)
		retryAfter = &v
	}
	text, err := s.sealError(n.TaskID, n.Error)
	if err != nil {
		return Task{}, err
	}
	rows, err := s.pool.Query(ctx, nackTask, n.TaskID, n.LeaseToken, n.WorkerID, n.Retryable, retryAfter, text, s.now())
	t, err := s.oneEnded(rows, err, ErrLeaseLost)
	if err != nil {
		return Task{}, fmt.Errorf("nack task %s: %w", n.TaskID, err)
	}
	return t, nil
}

// Release ends the current attempt as released and puts the task back in line
// (pending, keeping its place, or due after r.DelayMs when set) without spending its
// retry budget; a task with a cancel requested is cancelled instead. It returns ErrLeaseLost, changing nothing,
// unless the token is the current, unexpired lease.
func (s *Store) Release(ctx context.Context, r Release) (Task, error) {
	text, err := s.sealError(r.TaskID, r.Reason)
	if err != nil {
		return Task{}, err
	}
	rows, err := s.pool.Query(ctx, releaseTask, r.TaskID, r.LeaseToken, r.WorkerID, text, r.DelayMs, s.now())
	t, err := s.oneEnded(rows, err, ErrLeaseLost)
	if err != nil {
		return Task{}, fmt.Errorf("release task %s: %w", r.TaskID, err)
	}
	return t, nil
}

// ReclaimExpired ends up to limit attempts whose lease expired (abandoned) or whose
// deadline passed (timed_out), retrying or dead-lettering their tasks.
func (s *Store) ReclaimExpired(ctx context.Context, limit int) ([]Reclaimed, error) {
	rows, err := s.pool.Query(ctx, reclaimExpired, limit, s.now())
	if err != nil {
		return nil, fmt.Errorf("reclaim expired leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Reclaimed])
	if err != nil {
		return nil, fmt.Errorf("reclaim expired leases: %w", err)
	}
	return out, nil
}

// ExecutingIDs returns the ids of queue's executing tasks.
func (s *Store) ExecutingIDs(ctx context.Context, queue string) ([]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, executingIDs, queue)
	if err != nil {
		return nil, fmt.Errorf("executing tasks of %s: %w", queue, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("executing tasks of %s: %w", queue, err)
	}
	return ids, nil
}

// NextLeaseExpiry returns how long until the earliest lease expires (zero or less when
// one already has), and false when no task is executing.
func (s *Store) NextLeaseExpiry(ctx context.Context) (time.Duration, bool, error) {
	var wait *float64
	err := s.pool.QueryRow(ctx, nextLeaseExpiry).Scan(&wait)
	if err != nil {
		return 0, false, fmt.Errorf("next lease expiry: %w", err)
	}
	if wait == nil {
		return 0, false, nil
	}
	return time.Duration(*wait * float64(time.Second)), true, nil
}

// ListWorkers returns every known worker; those silent for longer than staleAfter
// are marked stale.
func (s *Store) ListWorkers(ctx context.Context, staleAfter time.Duration) ([]Worker, error) {
	rows, err := s.pool.Query(ctx, listWorkers, ms(staleAfter))
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Worker])
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}
