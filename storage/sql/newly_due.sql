-- name: newly_due
-- newly_due lists the unpaused queues holding a task written to wait that became due
-- after $1 (and is due now), with the database clock, which the caller passes back as
-- the next $1. It reads tasks_due_at_idx from $1 on: its cost is the number of tasks
-- that became due, not the number of queues or of waiting tasks.
--
-- Parameters:
--   $1 timestamptz: the database clock of the previous call
-- Returns: coalesce, now.
SELECT coalesce(array_agg(DISTINCT d.queue) FILTER (WHERE NOT q.paused), '{}'), now()
FROM (SELECT queue FROM tasks
	WHERE status IN ('pending', 'retry') AND scheduled_at > updated_at
		AND scheduled_at > $1 AND scheduled_at <= now()) d
JOIN queues q ON q.name = d.queue
