-- name: due_queues
-- due_queues lists every unpaused queue holding a due pending or retry task: the
-- periodic sweep's one statement, one probe of tasks_queue_due_idx per queue (which
-- only statements saying "priority > 0" may use), at time $1 (NULL: now()).
--
-- Parameters:
--   $1 timestamptz: the time (NULL: now())
-- Returns: name.
SELECT q.name FROM queues q
WHERE NOT q.paused AND EXISTS (SELECT 1 FROM tasks t
	WHERE t.queue = q.name AND t.status IN ('pending', 'retry') AND t.priority > 0
		AND t.scheduled_at <= coalesce($1::timestamptz, now()))
