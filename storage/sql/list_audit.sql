-- name: list_audit
-- list_audit: up to $3 entries newest first, older than id $2 (0 = from the newest), of
-- queue $1 (NULL = all).
--
-- Parameters:
--   $1 text: the queue (NULL: every queue)
--   $2 int8: the id below which to continue (0: from the newest)
--   $3 int8: the most rows to take
-- Returns: id, at, actor, token_id, via, remote_addr, method, route, queue, target,
--   status, request.
SELECT id, at, actor, token_id, via, remote_addr, method, route, queue, target, status, request FROM audit_log
WHERE ($1::text IS NULL OR queue = $1) AND ($2::bigint = 0 OR id < $2)
ORDER BY id DESC LIMIT $3
