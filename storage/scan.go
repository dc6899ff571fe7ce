package storage

import (
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// taskColumnNames are the columns of a task row, in the order of the statements
// that return one (get_task's; TestStatementColumns checks each against it).
var taskColumnNames = []string{"id", "queue", "payload", "priority", "status", "scheduled_at",
	"attempts", "max_retries", "timeout_seconds", "idempotency_key", "fingerprint", "last_error",
	"result", "claimed_by", "lease_token", "heartbeat_at", "lease_expires_at", "cancel_requested",
	"replayed_from", "replay_count", "replayed_at", "attempt_started_at", "traceparent", "releases",
	"progress", "created_at", "updated_at", "finished_at", "schedule", "workflow_id", "step",
	"debounce_key", "debounced", "group_key"}

// bufferedColumnNames are the columns of a statement that dispatches tasks
// (dispatch_due, dispatch_due_grouped), in order.
var bufferedColumnNames = []string{"id", "priority", "scheduled_at", "from_status", "traceparent", "group_key"}

// appendBufferedFields appends b's fields in the order of bufferedColumnNames.
func appendBufferedFields(fields []any, b *Buffered) []any {
	return append(fields, &b.ID, &b.Priority, &b.ScheduledAt, &b.FromStatus, &b.Traceparent, &b.Group)
}

// endedColumnNames are the columns of a statement that ends tasks: the task, then
// what its end did to its workflow.
var endedColumnNames = append(slices.Clone(taskColumnNames), "wf_effects")

// taskFields are t's fields in the order of taskColumnNames (TestTaskFieldsFollowTaskColumns
// checks the two against each other). The jsonb columns are scanned as the bytes
// PostgreSQL sends, which are valid JSON: into a json.RawMessage pgx would run
// json.Unmarshal over each, a tenth of serve's CPU while it loads batches of tasks.
func taskFields(t *Task) []any { return appendTaskFields(nil, t) }

// appendTaskFields appends taskFields(t) to fields, so that a scan of many rows
// reuses one slice.
func appendTaskFields(fields []any, t *Task) []any {
	return append(fields, &t.ID, &t.Queue, (*[]byte)(&t.Payload), &t.Priority, &t.Status, &t.ScheduledAt, &t.Attempts,
		&t.MaxRetries, &t.TimeoutSeconds, &t.IdempotencyKey, &t.Fingerprint, &t.LastError, (*[]byte)(&t.Result),
		&t.ClaimedBy, &t.LeaseToken, &t.HeartbeatAt, &t.LeaseExpiresAt, &t.CancelRequested,
		&t.ReplayedFrom, &t.ReplayCount, &t.ReplayedAt, &t.AttemptStartedAt, &t.Traceparent,
		&t.Releases, (*[]byte)(&t.Progress), &t.CreatedAt, &t.UpdatedAt, &t.FinishedAt, &t.Schedule,
		&t.WorkflowID, &t.Step, &t.DebounceKey, &t.Debounced, &t.Group)
}

// endedFields are e's fields in the order of endedColumnNames.
func endedFields(e *endedTask) []any {
	return append(taskFields(&e.Task), &e.WFEffects)
}

// collectByPosition is pgx.CollectRows with pgx.RowToStructByName[T], without its
// reflection on every row, for the statements that return tasks: when the result's
// columns are names, in order (decided once, from its row description), each row is
// scanned straight into fields; any other result goes by name. On the claim and
// ack of batched workers the reflection was a tenth of serve's CPU.
func collectByPosition[T any](rows pgx.Rows, names []string, fields func(*T) []any) ([]T, error) {
	if !columnsAre(rows.FieldDescriptions(), names) {
		return pgx.CollectRows(rows, pgx.RowToStructByName[T])
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) {
		var v T
		err := row.Scan(fields(&v)...)
		return v, err
	})
}

// appendByPosition is collectByPosition appending to dst: each row is scanned in
// place into the next element of dst, through one slice of field pointers reused
// from row to row (fields appends an element's to its first argument). Given room
// for every row, a batch of tasks costs no allocation of its own beyond what the
// scan of each column needs; collectByPosition's per-row value, field slice and
// the copies of a growing slice were a fifth of serve's CPU on batched polls.
func appendByPosition[T any](dst []T, rows pgx.Rows, names []string, fields func([]any, *T) []any) ([]T, error) {
	if !columnsAre(rows.FieldDescriptions(), names) {
		return pgx.AppendRows(dst, rows, pgx.RowToStructByName[T])
	}
	defer rows.Close()
	var ptrs []any
	for rows.Next() {
		var zero T
		dst = append(dst, zero)
		ptrs = fields(ptrs[:0], &dst[len(dst)-1])
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return dst, nil
}

func columnsAre(fds []pgconn.FieldDescription, names []string) bool {
	if len(fds) != len(names) {
		return false
	}
	for i := range fds {
		if fds[i].Name != names[i] {
			return false
		}
	}
	return true
}
