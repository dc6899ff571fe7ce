-- name: queues_changed_since
-- queues_changed_since returns the queues updated at or after $1, with the database
-- clock for the next call.
--
-- Parameters:
--   $1 timestamptz: the read_at of the previous call
-- Returns: name, max_retries, rate_limit, rate_burst, max_concurrency, backoff_base_ms,
--   backoff_max_ms, paused, priority_aging_ms, push, push_secret, retention, idempotency_window_ms,
--   fairness, group_max_concurrency, group_rate_limit, group_rate_burst,
--   created_at, updated_at, read_at.
SELECT name, max_retries, rate_limit, rate_burst, max_concurrency,
	backoff_base_ms, backoff_max_ms, paused, priority_aging_ms, push, push_secret, retention, idempotency_window_ms,
	fairness, group_max_concurrency, group_rate_limit, group_rate_burst, created_at, updated_at, now() AS read_at FROM queues WHERE updated_at >= $1
