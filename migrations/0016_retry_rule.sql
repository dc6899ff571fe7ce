-- 0016: the retry rule, written once: the nack (nack_task) and the reclaim of expired
-- leases (reclaim_expired) both decide with these functions. Both are plain SQL
-- expressions, which PostgreSQL inlines into the statements that call them.
--
-- taskforge_next_status: where a task goes when an attempt ends unsuccessfully.
-- Cancelled when a cancel was requested (never retried); dead when the failure is
-- not retryable or the budget is spent: max_retries counts retries after the first
-- attempt, and attempts a stopping worker released do not count; retry otherwise.
CREATE FUNCTION taskforge_next_status(attempts integer, releases integer, max_retries integer,
	cancel_requested boolean, retryable boolean)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT CASE WHEN cancel_requested THEN 'cancelled'
		WHEN NOT retryable OR attempts - releases > max_retries THEN 'dead'
		ELSE 'retry' END
$$;

-- taskforge_backoff_ms: the delay in milliseconds before the retry after failed
-- attempt number attempts (1-based): min(base * 2^(attempts-1) + rand(0, base), max).
-- Volatile, for its random jitter.
CREATE FUNCTION taskforge_backoff_ms(attempts integer, base_ms bigint, max_ms bigint)
RETURNS float8
LANGUAGE sql VOLATILE AS $$
	SELECT least(base_ms * power(2::float8, attempts - 1) + floor(random() * (base_ms + 1)), max_ms::float8)
$$;
