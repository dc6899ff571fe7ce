-- name: get_task
-- get_task reads a task, live (tasks) or finished (task_history), by id.
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid: the id
-- Returns: every column of the task row (as get_task).
SELECT id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key FROM all_tasks WHERE queue = $1 AND id = $2
