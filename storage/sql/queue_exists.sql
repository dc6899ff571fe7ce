-- name: queue_exists
--
-- Parameters:
--   $1 text: the name
-- Returns: exists.
SELECT EXISTS (SELECT 1 FROM queues WHERE name = $1)
