-- name: lock_dead
-- lock_dead locks the dead tasks to replay: the given ids, or all when $3.
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid[]: the id
--   $3 bool: true: every dead task of the queue, not only those of $2
-- Returns: id.
SELECT id FROM tasks
WHERE queue = $1 AND status = 'dead' AND ($3 OR id = ANY($2::uuid[]))
ORDER BY finished_at, id
FOR UPDATE
