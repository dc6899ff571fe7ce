-- name: delete_queue
-- delete_queue deletes a queue; its tasks go with it (migration 0015's trigger), and
-- so do its idempotency keys.
--
-- Parameters:
--   $1 text: the name
-- Returns: no rows.
WITH keys AS (DELETE FROM idempotency_keys WHERE queue = $1)
DELETE FROM queues WHERE name = $1
