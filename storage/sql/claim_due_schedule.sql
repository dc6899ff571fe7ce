-- name: claim_due_schedule
-- claim_due_schedule locks the unpaused schedule whose tick is most overdue, skipping
-- those another scheduler holds and those named in $1 (they failed this pass), and
-- returns it with the database clock: one probe of schedules_due_idx, however many
-- schedules exist.
--
-- Parameters:
--   $1 text[]: the schedules to skip (they failed this pass)
-- Returns: name, queue, cron, timezone, payload, priority, max_retries,
--   timeout_seconds, group_key, paused, next_run_at, last_run_at, last_task_id, created_at,
--   updated_at, db_now.
SELECT name, queue, cron, timezone, payload, priority, max_retries, timeout_seconds, group_key,
	paused, next_run_at, last_run_at, last_task_id, created_at, updated_at, now() AS db_now FROM schedules
WHERE NOT paused AND next_run_at IS NOT NULL AND next_run_at <= now() AND NOT (name = ANY($1::text[]))
ORDER BY next_run_at
LIMIT 1
FOR UPDATE SKIP LOCKED
