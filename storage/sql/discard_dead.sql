-- name: discard_dead
-- discard_dead deletes a dead task, and its idempotency key's reservation, or, within
-- its queue's idempotency window, keeps the key reserved until the window ends (0022).
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid: the id
-- Returns: id (of the task deleted, if any).
WITH gone AS (
	DELETE FROM tasks WHERE queue = $1 AND id = $2 AND status = 'dead'
	RETURNING id, idempotency_key
), keys AS (
	SELECT taskforge_release_idempotency_keys(array_agg($1::text), array_agg(idempotency_key), array_agg(id)) AS kept
	FROM gone
)
SELECT id FROM gone WHERE (SELECT count(*) FROM keys) >= 0
