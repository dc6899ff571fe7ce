-- name: get_workflow
--
-- Parameters:
--   $1 uuid: the id
-- Returns: id, name, status, idempotency_key, fingerprint, created_at, finished_at.
SELECT id, name, status, idempotency_key, fingerprint, created_at, finished_at FROM workflows WHERE id = $1
