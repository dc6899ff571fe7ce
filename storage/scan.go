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

// endedColumnNames are the columns of a statement that ends tasks: the task, then
// what its end did to its workflow.
var endedColumnNames = append(slices.Clone(taskColumnNames), "wf_effects")

// taskFields are t's fields in the order of taskColumnNames (TestTaskFieldsFollowTaskColumns
// checks the two against each other). The jsonb columns are scanned as the bytes
// PostgreSQL sends, which are valid JSON: into a json.RawMessage pgx would run
// json.Unmarshal over each, a tenth of serve's CPU while it loads batches of tasks.
func taskFields(t *Task) []any {
	return []any{&t.ID, &t.Queue, (*[]byte)(&t.Payload), &t.Priority, &t.Status, &t.ScheduledAt, &t.Attempts,
		&t.MaxRetries, &t.TimeoutSeconds, &t.IdempotencyKey, &t.Fingerprint, &t.LastError, (*[]byte)(&t.Result),
		&t.ClaimedBy, &t.LeaseToken, &t.HeartbeatAt, &t.LeaseExpiresAt, &t.CancelRequested,
		&t.ReplayedFrom, &t.ReplayCount, &t.ReplayedAt, &t.AttemptStartedAt, &t.Traceparent,
		&t.Releases, (*[]byte)(&t.Progress), &t.CreatedAt, &t.UpdatedAt, &t.FinishedAt, &t.Schedule,
		&t.WorkflowID, &t.Step, &t.DebounceKey, &t.Debounced, &t.Group}
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
