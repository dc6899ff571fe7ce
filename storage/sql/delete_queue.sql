-- name: delete_queue
--
-- Parameters:
--   $1 text: the name
-- Returns: no rows.
DELETE FROM queues WHERE name = $1
