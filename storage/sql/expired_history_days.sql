-- name: expired_history_days
-- expired_history_days lists the day partitions of history whose whole UTC day every
-- queue's retention for their status has passed (the queue's own age, else the
-- default of $1..$3; NULL keeps forever, so one queue that keeps a status forever
-- keeps every day of it), oldest first. Without queues, the defaults decide.
--
-- Parameters:
--   $1 int8: the default retention of done tasks in ms (NULL = forever)
--   $2 int8: the default retention of cancelled tasks in ms (NULL = forever)
--   $3 int8: the default retention of dead tasks in ms (NULL = forever)
--   $4 timestamptz: now: the Store's clock, or NULL for the database's
-- Returns: status, day.
WITH defaults (status, ms) AS (
	VALUES ('done', $1::int8), ('cancelled', $2::int8), ('dead', $3::int8)
), ages AS (
	SELECT d.status, taskforge_retention_ms(q.retention, d.status, d.ms) AS ms
	FROM queues q CROSS JOIN defaults d
	UNION ALL
	SELECT status, ms FROM defaults WHERE NOT EXISTS (SELECT 1 FROM queues)
), horizon AS (
	SELECT status, max(ms) AS ms FROM ages GROUP BY status HAVING bool_and(ms IS NOT NULL)
)
SELECT p.status, p.day FROM taskforge_history_partitions p JOIN horizon h ON h.status = p.status
WHERE (p.day + 1)::timestamp AT TIME ZONE 'UTC' <= coalesce($4::timestamptz, now()) - h.ms * interval '1 millisecond'
ORDER BY p.day, p.status
