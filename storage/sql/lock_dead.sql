-- name: lock_dead
-- lock_dead locks the dead tasks to replay: the given ids, or all when $3, live ones
-- (tasks) and ones in history (task_history), and returns them oldest death first.
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid[]: the id
--   $3 bool: true: every dead task of the queue, not only those of $2
-- Returns: id.
WITH live AS (
	SELECT id, finished_at FROM tasks
	WHERE queue = $1 AND status = 'dead' AND ($3 OR id = ANY($2::uuid[]))
	ORDER BY finished_at, id
	FOR UPDATE
), old AS (
	SELECT id, finished_at FROM task_history
	WHERE queue = $1 AND status = 'dead' AND ($3 OR id = ANY($2::uuid[]))
	ORDER BY finished_at, id
	FOR UPDATE
)
SELECT id FROM (SELECT id, finished_at FROM live UNION ALL SELECT id, finished_at FROM old) d
ORDER BY finished_at, id
