-- name: idempotency_reservations
-- idempotency_reservations reads the keys of a queue that are reserved past their
-- task's deletion and still within their window: a repeat of one of them is a
-- duplicate_request naming task_id. A key is reserved by its reserved_until (set when
-- its task was deleted, migration 0022) or, when that is NULL and no table holds its
-- task any more (its day of history was dropped, migration 0034), until its
-- created_at + its queue's idempotency window.
--
-- Parameters:
--   $1 text: the queue
--   $2 text[]: the keys
-- Returns: key, task_id, reserved_until.
SELECT k.key, k.task_id, r.until AS reserved_until
FROM idempotency_keys k
JOIN queues q ON q.name = k.queue
CROSS JOIN LATERAL (SELECT coalesce(k.reserved_until,
	k.created_at + q.idempotency_window_ms * interval '1 millisecond') AS until) r
WHERE k.queue = $1 AND k.key = ANY($2::text[]) AND r.until > now()
	AND (k.reserved_until IS NOT NULL OR NOT EXISTS (SELECT 1 FROM all_tasks t WHERE t.id = k.task_id))
