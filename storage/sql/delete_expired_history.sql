-- name: delete_expired_history
-- delete_expired_history deletes up to $4 finished plain tasks of history that their
-- queue's retention for their status has passed while some other queue keeps that
-- status longer (the queue's own age, else the default of $1..$3; NULL keeps
-- forever): what every queue lets go leaves with its day partition instead
-- (expired_history_days). Their attempts go with them; their idempotency keys too,
-- or, within their queue's idempotency window, stay reserved until it ends (0022).
-- One statement for every queue; each (queue, status) reads its oldest tasks through
-- task_history_list_idx (a task is created before it finishes, so created_at bounds
-- the range). SKIP LOCKED leaves rows that another transaction holds to a later batch.
--
-- Parameters:
--   $1 int8: the default retention of done tasks in ms (NULL = forever)
--   $2 int8: the default retention of cancelled tasks in ms (NULL = forever)
--   $3 int8: the default retention of dead tasks in ms (NULL = forever)
--   $4 int8: the most rows to take
--   $5 timestamptz: now: the Store's clock, or NULL for the database's
-- Returns: no rows.
WITH ages AS (
	SELECT q.name AS queue, d.status, taskforge_retention_ms(q.retention, d.status, d.ms) AS ms
	FROM queues q
	CROSS JOIN (VALUES ('done', $1::int8), ('cancelled', $2::int8), ('dead', $3::int8)) AS d (status, ms)
), horizon AS (
	SELECT status, CASE WHEN bool_and(ms IS NOT NULL) THEN max(ms) END AS ms FROM ages GROUP BY status
), shorter AS (
	SELECT a.queue, a.status, coalesce($5::timestamptz, now()) - a.ms * interval '1 millisecond' AS cutoff
	FROM ages a JOIN horizon h ON h.status = a.status
	WHERE a.ms IS NOT NULL AND (h.ms IS NULL OR a.ms < h.ms)
), doomed AS (
	SELECT x.id, x.queue, x.status, x.finished_at, x.idempotency_key FROM shorter s
	CROSS JOIN LATERAL (
		SELECT t.id, t.queue, t.status, t.finished_at, t.idempotency_key FROM task_history t
		WHERE t.queue = s.queue AND t.status = s.status
			AND t.created_at < s.cutoff AND t.finished_at < s.cutoff
			AND t.workflow_id IS NULL -- workflows go whole (expired_workflows)
		LIMIT $4
		FOR UPDATE SKIP LOCKED
	) x
	LIMIT $4
), keys AS (
	SELECT taskforge_release_idempotency_keys(array_agg(queue), array_agg(idempotency_key), array_agg(id)) AS kept
	FROM doomed
), attempts AS (
	DELETE FROM attempt_history a USING doomed d
	WHERE a.task_id = d.id AND a.task_status = d.status AND a.task_finished_at = d.finished_at
)
DELETE FROM task_history t USING doomed d
WHERE t.id = d.id AND t.status = d.status AND t.finished_at = d.finished_at AND (SELECT count(*) FROM keys) >= 0
