-- name: finished_in_tasks
-- finished_in_tasks counts the finished tasks (done, cancelled, dead) still in tasks,
-- which a release before history left there for the mover (package backfill), and
-- finds the oldest one's finished_at, so that the mover creates history's day
-- partitions before it moves rows into them. One read of tasks.
--
-- Parameters: none.
-- Returns: n, oldest (NULL when n is 0).
SELECT count(*) AS n, min(finished_at) AS oldest FROM tasks WHERE status IN ('done', 'cancelled', 'dead')
