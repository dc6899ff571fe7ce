-- name: schedule_fired
-- schedule_fired records a fired tick ($2 next tick, $3 task, $4 when): last_run_at is
-- when it fired.
--
-- Parameters:
--   $1 text: the schedule
--   $2 timestamptz: the next tick (next_run_at)
--   $3 uuid: the task it fired (last_task_id)
--   $4 timestamptz: when it fired (last_run_at)
-- Returns: no rows.
UPDATE schedules SET next_run_at = $2, last_task_id = $3, last_run_at = $4
WHERE name = $1
