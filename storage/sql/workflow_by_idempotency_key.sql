-- name: workflow_by_idempotency_key
--
-- Parameters:
--   $1 text: the idempotency_key
-- Returns: id, fingerprint.
SELECT id, fingerprint FROM workflows WHERE idempotency_key = $1
