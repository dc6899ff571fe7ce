-- name: next_lease_expiry
-- next_lease_expiry is when the watchdog next has work: the earliest lease expiry.
--
-- Parameters: none.
-- Returns: extract.
SELECT extract(epoch FROM min(lease_expires_at) - now())::float8
FROM tasks WHERE status = 'executing'
