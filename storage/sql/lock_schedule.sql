-- name: lock_schedule
-- lock_schedule is get_schedule holding the row until the transaction ends, with the
-- database clock.
--
-- Parameters:
--   $1 text: the name
-- Returns: name, queue, cron, timezone, payload, priority, max_retries,
--   timeout_seconds, group_key, paused, next_run_at, last_run_at, last_task_id, created_at,
--   updated_at, db_now.
SELECT name, queue, cron, timezone, payload, priority, max_retries, timeout_seconds, group_key,
	paused, next_run_at, last_run_at, last_task_id, created_at, updated_at, now() AS db_now FROM schedules WHERE name = $1 FOR UPDATE
