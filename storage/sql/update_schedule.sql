-- name: update_schedule
--
-- Parameters:
--   $1 text: the schedule
--   $2 text: the new queue
--   $3 text: the new cron
--   $4 text: the new timezone
--   $5 jsonb: the new payload
--   $6 int2: the new priority
--   $7 int4: the new max_retries
--   $8 int4: the new timeout_seconds
--   $9 bool: the new paused
--   $10 timestamptz: the new next_run_at
--   $11 text: the group_key of its tasks (NULL: the unnamed group)
-- Returns: name, queue, cron, timezone, payload, priority, max_retries,
--   timeout_seconds, group_key, paused, next_run_at, last_run_at, last_task_id, created_at,
--   updated_at.
UPDATE schedules SET queue = $2, cron = $3, timezone = $4, payload = $5::jsonb,
	priority = $6, max_retries = $7, timeout_seconds = $8, paused = $9, next_run_at = $10, group_key = $11,
	updated_at = now()
WHERE name = $1
RETURNING name, queue, cron, timezone, payload, priority, max_retries, timeout_seconds, group_key,
	paused, next_run_at, last_run_at, last_task_id, created_at, updated_at
