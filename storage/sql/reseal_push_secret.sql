-- name: reseal_push_secret
--
-- Parameters:
--   $1 text: the queue
--   $2 text: the re-sealed push secret
-- Returns: no rows.
UPDATE queues SET push_secret = $2 WHERE name = $1
