-- name: holds_live_tasks
-- holds_live_tasks: does the queue hold a task that is not finished (or is dead)?
-- EXISTS stops at the first, however large the backlog.
--
-- Parameters:
--   $1 text: the queue
-- Returns: exists.
SELECT EXISTS (SELECT 1 FROM all_tasks
WHERE queue = $1 AND status IN ('pending', 'blocked', 'claimed', 'executing', 'retry', 'dead'))
