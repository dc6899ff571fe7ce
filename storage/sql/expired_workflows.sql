-- name: expired_workflows
-- expired_workflows: up to $4 finished workflows every task of which is finished and
-- past its queue's retention for its status (the queue's own age, else the default
-- of $1..$3; NULL keeps forever), so a workflow goes whole when its last task
-- expires; by default a dead step keeps its failed workflow (it may resume it).
-- Oldest first, locked.
--
-- Parameters:
--   $1 int8: the default retention of done tasks in ms (NULL = forever)
--   $2 int8: the default retention of cancelled tasks in ms (NULL = forever)
--   $3 int8: the default retention of dead tasks in ms (NULL = forever)
--   $4 int8: the most rows to take
-- Returns: id.
SELECT w.id FROM workflows w
WHERE w.status <> 'running'
	AND w.finished_at < now() - interval '1 minute' -- no queue keeps anything shorter
	AND NOT EXISTS (SELECT 1 FROM all_tasks t JOIN queues q ON q.name = t.queue
		WHERE t.workflow_id = w.id
			AND (t.status NOT IN ('done', 'cancelled', 'dead')
				OR NOT coalesce(t.finished_at < now() - taskforge_retention_ms(q.retention, t.status,
					CASE t.status WHEN 'done' THEN $1::int8 WHEN 'cancelled' THEN $2::int8 ELSE $3::int8 END)
					* interval '1 millisecond', false)))
ORDER BY w.finished_at
LIMIT $4
FOR UPDATE SKIP LOCKED
