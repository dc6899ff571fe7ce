-- name: schedules_of_queue
-- schedules_of_queue names the schedules that target queue $1 (DeleteQueue refuses
-- while any does).
--
-- Parameters:
--   $1 text: the queue
-- Returns: name.
SELECT name FROM schedules WHERE queue = $1 ORDER BY name LIMIT 20
