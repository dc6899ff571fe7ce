-- name: bulk_discard_dead
-- bulk_discard_dead deletes up to $4 dead tasks of queue $1: those among $2, or any
-- when $3. Their attempts go by ON DELETE CASCADE, their idempotency keys with them,
-- or, within their queue's idempotency window, reserved until it ends (0022).
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid[]: the id
--   $3 bool: true: any dead task of the queue, not only those of $2
--   $4 int8: the most rows to take
-- Returns: id (of each task deleted).
WITH doomed AS (
	SELECT id FROM tasks
	WHERE queue = $1 AND status = 'dead' AND ($3 OR id = ANY($2::uuid[]))
	LIMIT $4
	FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM tasks t USING doomed WHERE t.id = doomed.id
	RETURNING t.id, t.idempotency_key
), keys AS (
	SELECT taskforge_release_idempotency_keys(array_agg($1::text), array_agg(idempotency_key), array_agg(id)) AS kept
	FROM gone
)
SELECT id FROM gone WHERE (SELECT count(*) FROM keys) >= 0
