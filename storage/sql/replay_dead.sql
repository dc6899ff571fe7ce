-- name: replay_dead
-- replay_dead creates a new pending task from each dead one (keeping the schedule that
-- created it, and its group) and marks the dead ones replayed, live (tasks) or in history
-- (task_history); the dead tasks keep their history.
--
-- Parameters:
--   $1 uuid[]: the dead tasks, in the order to replay them
-- Returns: every column of the task row (as get_task).
WITH src AS (
	SELECT t.*, u.ord FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord)
	JOIN all_tasks t ON t.id = u.id
), marked AS (
	UPDATE tasks t SET replay_count = t.replay_count + 1, replayed_at = now(), updated_at = now()
	WHERE t.id = ANY($1::uuid[])
), marked_old AS (
	UPDATE task_history t SET replay_count = t.replay_count + 1, replayed_at = now(), updated_at = now()
	WHERE t.status = 'dead' AND t.id = ANY($1::uuid[])
)
INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries,
	timeout_seconds, replayed_from, schedule, group_key)
SELECT gen_random_uuid(), src.queue, src.payload, src.priority, 'pending', now(), src.max_retries,
	src.timeout_seconds, src.id, src.schedule, src.group_key
FROM src ORDER BY src.ord
RETURNING id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key
