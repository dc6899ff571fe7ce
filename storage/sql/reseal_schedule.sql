-- name: reseal_schedule
--
-- Parameters:
--   $1 text: the schedule
--   $2 jsonb: the re-sealed payload
-- Returns: no rows.
UPDATE schedules SET payload = $2::jsonb WHERE name = $1
