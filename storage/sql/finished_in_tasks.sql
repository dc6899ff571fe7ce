-- name: finished_in_tasks
-- finished_in_tasks counts the finished tasks (done, cancelled, dead) still in tasks,
-- which a release before history left there for the mover (package backfill), and
-- finds the oldest one's finished_at, so that the mover creates history's day
-- partitions before it moves rows into them.
--
-- One probe of tasks_status_list_idx (queue, status, ...) per queue, so that it stays
-- a read of the finished rows alone once migration 0027 has dropped the indexes of
-- finished rows: a count over status alone would read the whole table (every live
-- task) each time the mover runs. The statuses are literals: against a parameter,
-- the planner guesses every row of the queue (its statistics see live statuses only)
-- and reads the whole table for each queue.
--
-- Parameters: none.
-- Returns: n, oldest (NULL when n is 0).
SELECT coalesce(sum(f.n), 0)::int8 AS n, min(f.oldest) AS oldest
FROM queues q
CROSS JOIN LATERAL (
	SELECT count(*) AS n, min(t.finished_at) AS oldest FROM tasks t
	WHERE t.queue = q.name AND t.status IN ('done', 'cancelled', 'dead')
) f
