-- name: any_dead
-- any_dead: does queue $1 still hold a dead task among $2 (any, when $3)?
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid[]: the id
--   $3 bool: true: any dead task of the queue, not only those of $2
-- Returns: exists.
SELECT EXISTS (SELECT 1 FROM all_tasks
WHERE queue = $1 AND status = 'dead' AND ($3 OR id = ANY($2::uuid[])))
