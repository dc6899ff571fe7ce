-- name: schedule_triggered
-- schedule_triggered records a run now that leaves the next tick alone.
--
-- Parameters:
--   $1 text: the schedule
--   $2 uuid: the task it fired (last_task_id)
-- Returns: no rows.
UPDATE schedules SET last_task_id = $2, last_run_at = now() WHERE name = $1
