-- name: lock_workflow
--
-- Parameters:
--   $1 uuid: the id
-- Returns: status, generation.
SELECT status, generation FROM workflows WHERE id = $1 FOR UPDATE
