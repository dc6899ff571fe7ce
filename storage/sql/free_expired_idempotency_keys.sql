-- name: free_expired_idempotency_keys
-- free_expired_idempotency_keys deletes the reservations among a queue's keys whose
-- window has ended (their task is gone), so that an enqueue that found them taken may
-- insert again: a reserved_until passed, or, with none, the window from created_at
-- passed and no table holds the task any more (its day of history was dropped,
-- migration 0034). The janitor deletes the others in batches
-- (delete_expired_idempotency_keys, delete_dropped_idempotency_keys); this is for the
-- keys an enqueue meets first.
--
-- Parameters:
--   $1 text: the queue
--   $2 text[]: the keys
-- Returns: key.
DELETE FROM idempotency_keys k
USING queues q
WHERE q.name = k.queue AND k.queue = $1 AND k.key = ANY($2::text[])
	AND (k.reserved_until <= now()
		OR (k.reserved_until IS NULL
			AND k.created_at + q.idempotency_window_ms * interval '1 millisecond' <= now()
			AND NOT EXISTS (SELECT 1 FROM all_tasks t WHERE t.id = k.task_id)))
RETURNING k.key
