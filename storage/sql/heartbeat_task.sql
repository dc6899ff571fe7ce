-- name: heartbeat_task
-- heartbeat_task extends a held lease, never past the attempt's deadline, and when $5
-- stores $6 as the attempt's progress (NULL clears it); $7 is the time (NULL: now()).
--
-- Parameters:
--   $1 uuid: the task
--   $2 uuid: its lease token
--   $3 text: the worker holding the lease
--   $4 float8: the lease to grant, in milliseconds
--   $5 bool: true: store $6 as the progress
--   $6 jsonb: the progress (NULL clears it)
--   $7 timestamptz: the time (NULL: now())
-- Returns: lease_expires_at, cancel_requested.
UPDATE tasks t SET
	lease_expires_at = least(coalesce($7::timestamptz, now()) + $4 * interval '1 millisecond', t.deadline_at),
	heartbeat_at = coalesce($7::timestamptz, now()),
	progress = CASE WHEN $5::bool THEN $6::jsonb ELSE t.progress END
WHERE t.id = $1 AND t.lease_token = $2 AND t.claimed_by = $3
	AND t.status || '' = 'executing' AND t.lease_expires_at > coalesce($7::timestamptz, now())
RETURNING t.lease_expires_at, t.cancel_requested
