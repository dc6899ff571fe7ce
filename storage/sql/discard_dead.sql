-- name: discard_dead
-- discard_dead deletes a dead task, and its idempotency key's reservation.
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid: the id
-- Returns: id (of the task deleted, if any).
WITH gone AS (
	DELETE FROM tasks WHERE queue = $1 AND id = $2 AND status = 'dead'
	RETURNING id, idempotency_key
), keys AS (
	DELETE FROM idempotency_keys k USING gone
	WHERE k.queue = $1 AND k.key = gone.idempotency_key AND k.task_id = gone.id
)
SELECT id FROM gone
