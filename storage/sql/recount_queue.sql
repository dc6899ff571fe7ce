-- name: recount_queue
-- recount_queue counts a queue's tasks by status the slow way, for CheckTally.
--
-- Parameters:
--   $1 text: the queue
-- Returns: status, count.
SELECT status, count(*) FROM all_tasks WHERE queue = $1 GROUP BY status
