-- name: get_queue
--
-- Parameters:
--   $1 text: the name
-- Returns: name, max_retries, rate_limit, rate_burst, max_concurrency, backoff_base_ms,
--   backoff_max_ms, paused, priority_aging_ms, push, push_secret, retention, idempotency_window_ms,
--   fairness, group_max_concurrency, group_rate_limit, group_rate_burst,
--   created_at, updated_at.
SELECT name, max_retries, rate_limit, rate_burst, max_concurrency,
	backoff_base_ms, backoff_max_ms, paused, priority_aging_ms, push, push_secret, retention, idempotency_window_ms,
	fairness, group_max_concurrency, group_rate_limit, group_rate_burst, created_at, updated_at FROM queues WHERE name = $1
