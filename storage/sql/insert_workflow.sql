-- name: insert_workflow
-- insert_workflow creates a workflow; nothing is returned when its idempotency key is
-- taken (ON CONFLICT waits for a concurrent holder, so identical concurrent submissions
-- create one workflow).
--
-- Parameters:
--   $1 uuid: id
--   $2 text: name
--   $3 text: idempotency_key
--   $4 bytea: fingerprint
--   $5 int4: steps_left
-- Returns: id, created_at.
INSERT INTO workflows (id, name, status, idempotency_key, fingerprint, steps_left)
VALUES ($1, $2, 'running', $3, $4, $5)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, created_at
