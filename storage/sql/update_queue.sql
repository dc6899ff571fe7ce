-- name: update_queue
--
-- Parameters:
--   $1 text: the queue
--   $2 int4: the new max_retries
--   $3 float8: the new rate_limit
--   $4 int4: the new rate_burst
--   $5 int4: the new max_concurrency
--   $6 int8: the new backoff_base_ms
--   $7 int8: the new backoff_max_ms
--   $8 bool: the new paused
--   $9 int8: the new priority_aging_ms
--   $10 jsonb: the new push
--   $11 text: the new push_secret
--   $12 jsonb: the new retention (the queue's own settings; see migration 0019)
--   $13 int8: the new idempotency_window_ms
--   $14 text: the new fairness
--   $15 int: the new group_max_concurrency
--   $16 float8: the new group_rate_limit
--   $17 int: the new group_rate_burst
-- Returns: name, max_retries, rate_limit, rate_burst, max_concurrency, backoff_base_ms,
--   backoff_max_ms, paused, priority_aging_ms, push, push_secret, retention, idempotency_window_ms,
--   fairness, group_max_concurrency, group_rate_limit, group_rate_burst,
--   created_at, updated_at.
UPDATE queues SET max_retries = $2, rate_limit = $3, rate_burst = $4,
	max_concurrency = $5, backoff_base_ms = $6, backoff_max_ms = $7, paused = $8,
	priority_aging_ms = $9, push = $10, push_secret = $11, retention = $12, idempotency_window_ms = $13,
	fairness = $14, group_max_concurrency = $15, group_rate_limit = $16, group_rate_burst = $17,
	updated_at = now()
WHERE name = $1
RETURNING name, max_retries, rate_limit, rate_burst, max_concurrency,
	backoff_base_ms, backoff_max_ms, paused, priority_aging_ms, push, push_secret, retention, idempotency_window_ms,
	fairness, group_max_concurrency, group_rate_limit, group_rate_burst, created_at, updated_at
