-- name: idempotency_reservations
-- idempotency_reservations reads the keys of a queue that are reserved past their
-- task's deletion (migration 0022) and still within their window: a repeat of one of
-- them is a duplicate_request naming task_id.
--
-- Parameters:
--   $1 text: the queue
--   $2 text[]: the keys
-- Returns: key, task_id, reserved_until.
SELECT key, task_id, reserved_until FROM idempotency_keys
WHERE queue = $1 AND key = ANY($2::text[]) AND reserved_until > now()
