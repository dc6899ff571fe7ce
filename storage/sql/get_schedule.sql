-- name: get_schedule
--
-- Parameters:
--   $1 text: the name
-- Returns: name, queue, cron, timezone, payload, priority, max_retries,
--   timeout_seconds, group_key, paused, next_run_at, last_run_at, last_task_id, created_at,
--   updated_at.
SELECT name, queue, cron, timezone, payload, priority, max_retries, timeout_seconds, group_key,
	paused, next_run_at, last_run_at, last_task_id, created_at, updated_at FROM schedules WHERE name = $1
