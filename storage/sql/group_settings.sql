-- name: group_settings
-- group_settings reads the overrides of those of groups $2 of queue $1 that have
-- some, through queue_groups' key.
--
-- Parameters:
--   $1 text: the queue
--   $2 text[]: the groups
-- Returns: group_key, weight, max_concurrency, rate_limit, rate_burst.
SELECT group_key, weight, max_concurrency, rate_limit, rate_burst FROM queue_groups
WHERE queue = $1 AND group_key = ANY($2::text[])
