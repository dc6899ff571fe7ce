-- name: delete_schedule
--
-- Parameters:
--   $1 text: the name
-- Returns: no rows.
DELETE FROM schedules WHERE name = $1
