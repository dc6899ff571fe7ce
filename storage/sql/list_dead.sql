-- name: list_dead
-- list_dead: a queue's dead tasks, most recently died first, keyset-paginated. It reads
-- tasks and task_history (all_tasks): each side's dead index in order, merged.
--
-- Parameters:
--   $1 text: the queue
--   $2 timestamptz: keyset position: the finished_at after which to continue (NULL: from the start)
--   $3 uuid: keyset position: the id after which to continue
--   $4 int8: the most rows to take
-- Returns: every column of the task row (as get_task).
SELECT id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key FROM all_tasks
WHERE queue = $1 AND status = 'dead'
	AND ($2::timestamptz IS NULL OR (finished_at, id) < ($2, $3::uuid))
ORDER BY finished_at DESC, id DESC
LIMIT $4
