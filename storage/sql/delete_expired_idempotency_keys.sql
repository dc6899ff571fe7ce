-- name: delete_expired_idempotency_keys
-- delete_expired_idempotency_keys deletes up to $2 key reservations whose window ended
-- before $1, oldest first through idempotency_keys_reserved_idx; SKIP LOCKED leaves
-- rows an enqueue holds to a later batch.
--
-- Parameters:
--   $1 timestamptz: now (the Store's clock; NULL: the database's now())
--   $2 int8: the most rows to take
-- Returns: no rows.
DELETE FROM idempotency_keys k USING (
	SELECT queue, key FROM idempotency_keys
	WHERE reserved_until <= coalesce($1::timestamptz, now())
	ORDER BY reserved_until
	LIMIT $2
	FOR UPDATE SKIP LOCKED
) doomed
WHERE k.queue = doomed.queue AND k.key = doomed.key
