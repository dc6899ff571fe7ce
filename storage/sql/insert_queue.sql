-- name: insert_queue
--
-- Parameters:
--   $1 text: name
--   $2 int4: max_retries
--   $3 float8: rate_limit
--   $4 int4: rate_burst
--   $5 int4: max_concurrency
--   $6 int8: backoff_base_ms
--   $7 int8: backoff_max_ms
--   $8 bool: paused
--   $9 int8: priority_aging_ms
--   $10 jsonb: push
--   $11 text: push_secret
--   $12 jsonb: retention (the queue's own settings; see migration 0019)
--   $13 int8: idempotency_window_ms (NULL: the column's default, 24 h)
--   $14 text: fairness
--   $15 int: group_max_concurrency
--   $16 float8: group_rate_limit
--   $17 int: group_rate_burst
-- Returns: name, max_retries, rate_limit, rate_burst, max_concurrency, backoff_base_ms,
--   backoff_max_ms, paused, priority_aging_ms, push, push_secret, retention, idempotency_window_ms,
--   fairness, group_max_concurrency, group_rate_limit, group_rate_burst,
--   created_at, updated_at.
INSERT INTO queues (name, max_retries, rate_limit, rate_burst, max_concurrency,
	backoff_base_ms, backoff_max_ms, paused, priority_aging_ms, push, push_secret, retention, idempotency_window_ms,
	fairness, group_max_concurrency, group_rate_limit, group_rate_burst)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, coalesce($13::int8, 86400000),
	$14, $15, $16, $17)
ON CONFLICT (name) DO NOTHING
RETURNING name, max_retries, rate_limit, rate_burst, max_concurrency,
	backoff_base_ms, backoff_max_ms, paused, priority_aging_ms, push, push_secret, retention, idempotency_window_ms,
	fairness, group_max_concurrency, group_rate_limit, group_rate_burst, created_at, updated_at
