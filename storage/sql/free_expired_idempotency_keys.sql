-- name: free_expired_idempotency_keys
-- free_expired_idempotency_keys deletes the reservations among a queue's keys whose
-- window has ended (their task is gone), so that an enqueue that found them taken may
-- insert again. The janitor deletes the others in batches
-- (delete_expired_idempotency_keys); this is for the keys an enqueue meets first.
--
-- Parameters:
--   $1 text: the queue
--   $2 text[]: the keys
-- Returns: key.
DELETE FROM idempotency_keys
WHERE queue = $1 AND key = ANY($2::text[]) AND reserved_until <= now()
RETURNING key
