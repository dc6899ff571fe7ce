-- name: tasks_by_idempotency_key
-- tasks_by_idempotency_key reads the holders of idempotency keys of a queue, live or
-- finished, through the keys' reservations.
--
-- Parameters:
--   $1 text: the queue
--   $2 text[]: the idempotency_key
-- Returns: every column of the task row (as get_task).
SELECT t.id, t.queue, t.payload, t.priority, t.status, t.scheduled_at, t.attempts, t.max_retries,
	t.timeout_seconds, t.idempotency_key, t.fingerprint, t.last_error, t.result, t.claimed_by, t.lease_token,
	t.heartbeat_at, t.lease_expires_at, t.cancel_requested, t.replayed_from, t.replay_count, t.replayed_at,
	t.attempt_started_at, t.traceparent, t.releases, t.progress, t.created_at, t.updated_at, t.finished_at,
	t.schedule, t.workflow_id, t.step, t.debounce_key, t.debounced, t.group_key
FROM idempotency_keys k JOIN all_tasks t ON t.id = k.task_id
WHERE k.queue = $1 AND k.key = ANY($2::text[])
