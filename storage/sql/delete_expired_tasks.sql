-- name: delete_expired_tasks
-- delete_expired_tasks deletes up to $4 finished plain tasks that their queue's
-- retention for their status has passed (the queue's own age, else the default of
-- $1..$3; NULL keeps forever); their attempts go with them (no foreign key cascades
-- since migration 0033), and their idempotency keys' reservations with them, or, within their queue's idempotency
-- window, stay reserved until it ends (0022). One statement for every queue: for each
-- queue and final status with an age, it reads that queue's oldest tasks of that
-- status through tasks_status_list_idx (a task is created before it finishes, so
-- created_at bounds the range). SKIP LOCKED leaves rows that another transaction
-- holds to a later batch.
--
-- Parameters:
--   $1 int8: the default retention of done tasks in ms (NULL = forever)
--   $2 int8: the default retention of cancelled tasks in ms (NULL = forever)
--   $3 int8: the default retention of dead tasks in ms (NULL = forever)
--   $4 int8: the most rows to take
-- Returns: no rows.
WITH ages AS (
	SELECT q.name AS queue, d.status,
		now() - taskforge_retention_ms(q.retention, d.status, d.default_ms) * interval '1 millisecond' AS cutoff
	FROM queues q
	CROSS JOIN (VALUES ('done', $1::int8), ('cancelled', $2::int8), ('dead', $3::int8)) AS d (status, default_ms)
), doomed AS (
	SELECT x.id, x.queue, x.idempotency_key FROM ages a
	CROSS JOIN LATERAL (
		SELECT t.id, t.queue, t.idempotency_key FROM tasks t
		WHERE t.queue = a.queue AND t.status = a.status
			AND t.created_at < a.cutoff AND t.finished_at < a.cutoff
			AND t.workflow_id IS NULL -- workflows go whole (expired_workflows)
		LIMIT $4
		FOR UPDATE SKIP LOCKED
	) x
	WHERE a.cutoff IS NOT NULL
	LIMIT $4
), keys AS (
	SELECT taskforge_release_idempotency_keys(array_agg(queue), array_agg(idempotency_key), array_agg(id)) AS kept
	FROM doomed
), doomed_attempts AS (
	DELETE FROM attempts a USING doomed WHERE a.task_id = doomed.id
)
DELETE FROM tasks t USING doomed WHERE t.id = doomed.id AND (SELECT count(*) FROM keys) >= 0
