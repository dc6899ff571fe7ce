-- name: insert_audit
-- insert_audit records one operator action.
--
-- Parameters:
--   $1 text: actor
--   $2 uuid: token_id
--   $3 text: via
--   $4 text: remote_addr
--   $5 text: method
--   $6 text: route
--   $7 text: queue
--   $8 text: target
--   $9 int4: status
--   $10 jsonb: request
-- Returns: no rows.
INSERT INTO audit_log (actor, token_id, via, remote_addr, method, route, queue, target, status, request)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
