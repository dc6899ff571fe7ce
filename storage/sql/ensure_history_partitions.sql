-- name: ensure_history_partitions
-- ensure_history_partitions creates the day partitions of history for the UTC days
-- from today to $2 days ahead, and for every day of which a default partition holds
-- rows (taskforge_ensure_history_partitions moves them into the new partition, so
-- that they leave with their day), and returns how many partitions it created.
--
-- Parameters:
--   $1 timestamptz: now: the Store's clock, or NULL for the database's
--   $2 int4: how many days, from today, must have their partitions
-- Returns: created.
SELECT coalesce(sum(taskforge_ensure_history_partitions(d, n)), 0)::int8 AS created FROM (
	SELECT (coalesce($1::timestamptz, now()) AT TIME ZONE 'UTC')::date AS d, $2::int4 AS n
	UNION
	SELECT DISTINCT (f AT TIME ZONE 'UTC')::date, 1 FROM (
		SELECT finished_at AS f FROM task_history_done_default
		UNION ALL SELECT finished_at FROM task_history_cancelled_default
		UNION ALL SELECT finished_at FROM task_history_dead_default
		UNION ALL SELECT task_finished_at FROM attempt_history_done_default
		UNION ALL SELECT task_finished_at FROM attempt_history_cancelled_default
		UNION ALL SELECT task_finished_at FROM attempt_history_dead_default
	) defaults
) days
