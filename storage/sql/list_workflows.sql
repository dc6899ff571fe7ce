-- name: list_workflows
-- list_workflows: newest first, keyset-paginated on (created_at, id); $1 NULL = any
-- status.
--
-- Parameters:
--   $1 text: the status (NULL: any)
--   $2 timestamptz: keyset position: the created_at after which to continue (NULL: from the start)
--   $3 uuid: keyset position: the id after which to continue
--   $4 int8: the most rows to take
-- Returns: id, name, status, idempotency_key, fingerprint, created_at, finished_at.
SELECT id, name, status, idempotency_key, fingerprint, created_at, finished_at FROM workflows
WHERE ($1::text IS NULL OR status = $1)
	AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3::uuid))
ORDER BY created_at DESC, id DESC
LIMIT $4
