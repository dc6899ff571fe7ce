-- name: next_schedule_in
-- next_schedule_in is how many seconds until the earliest unpaused tick (NULL when
-- none): one probe of schedules_due_idx.
--
-- Parameters: none.
-- Returns: extract.
SELECT extract(epoch FROM min(next_run_at) - now())::float8 FROM schedules
WHERE NOT paused AND next_run_at IS NOT NULL
