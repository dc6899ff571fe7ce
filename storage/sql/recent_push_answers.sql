-- name: recent_push_answers
-- recent_push_answers reads the last $2 finished attempts by pushers of each queue $1,
-- newest first, from attempts and attempt_history (attempts_finished_idx and
-- attempt_history_push_idx, read backwards per queue and merged).
--
-- Parameters:
--   $1 text[]: the queues
--   $2 int8: the most attempts to read per queue
-- Returns: queue, task_id, attempt, status, finished_at, error.
SELECT q.name AS queue, a.task_id, a.attempt, a.status, a.finished_at, a.error
FROM unnest($1::text[]) AS q(name)
CROSS JOIN LATERAL (
	SELECT task_id, attempt, status, finished_at, error FROM all_attempts
	WHERE queue = q.name AND finished_at IS NOT NULL AND worker_id LIKE 'push:%'
	ORDER BY finished_at DESC LIMIT $2
) a
ORDER BY q.name, a.finished_at DESC
