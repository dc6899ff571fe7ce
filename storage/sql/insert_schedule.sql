-- name: insert_schedule
-- insert_schedule creates a schedule; nothing is returned when the name is taken.
--
-- Parameters:
--   $1 text: name
--   $2 text: queue
--   $3 text: cron
--   $4 text: timezone
--   $5 jsonb: payload
--   $6 int2: priority
--   $7 int4: max_retries
--   $8 int4: timeout_seconds
--   $9 bool: paused
--   $10 timestamptz: next_run_at
--   $11 text: the group_key of its tasks (NULL: the unnamed group)
-- Returns: name, queue, cron, timezone, payload, priority, max_retries,
--   timeout_seconds, group_key, paused, next_run_at, last_run_at, last_task_id, created_at,
--   updated_at.
INSERT INTO schedules (name, queue, cron, timezone, payload, priority,
	max_retries, timeout_seconds, paused, next_run_at, group_key)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11)
ON CONFLICT (name) DO NOTHING
RETURNING name, queue, cron, timezone, payload, priority, max_retries, timeout_seconds, group_key,
	paused, next_run_at, last_run_at, last_task_id, created_at, updated_at
