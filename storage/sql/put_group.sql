-- name: put_group
-- put_group sets a group's overrides of its queue's group defaults (PUT
-- /queues/:name/groups/:group replaces them all; NULL keeps the queue's default).
-- No queue: a foreign key violation.
--
-- Parameters:
--   $1 text: the queue
--   $2 text: the group_key
--   $3 int: weight (NULL: 1)
--   $4 int: max_concurrency (NULL: the queue's group_max_concurrency)
--   $5 float8: rate_limit (NULL: the queue's group_rate_limit)
--   $6 int: rate_burst (NULL: the queue's group_rate_burst)
-- Returns: group_key, weight, max_concurrency, rate_limit, rate_burst.
INSERT INTO queue_groups AS g (queue, group_key, weight, max_concurrency, rate_limit, rate_burst)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (queue, group_key) DO UPDATE SET weight = EXCLUDED.weight,
	max_concurrency = EXCLUDED.max_concurrency, rate_limit = EXCLUDED.rate_limit,
	rate_burst = EXCLUDED.rate_burst, updated_at = now()
RETURNING group_key, weight, max_concurrency, rate_limit, rate_burst
