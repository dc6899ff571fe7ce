-- name: list_schedules
-- list_schedules: by name, of queue $1 (NULL = every queue).
--
-- Parameters:
--   $1 text: the queue (NULL: every queue)
-- Returns: name, queue, cron, timezone, payload, priority, max_retries,
--   timeout_seconds, group_key, paused, next_run_at, last_run_at, last_task_id, created_at,
--   updated_at.
SELECT name, queue, cron, timezone, payload, priority, max_retries, timeout_seconds, group_key,
	paused, next_run_at, last_run_at, last_task_id, created_at, updated_at FROM schedules
WHERE $1::text IS NULL OR queue = $1 ORDER BY name
