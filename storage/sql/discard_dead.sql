-- name: discard_dead
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid: the id
-- Returns: no rows.
DELETE FROM tasks WHERE queue = $1 AND id = $2 AND status = 'dead'
