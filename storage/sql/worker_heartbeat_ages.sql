-- name: worker_heartbeat_ages
-- worker_heartbeat_ages: seconds since each worker seen within $1 ms last heartbeated.
--
-- Parameters:
--   $1 float8: how far back to look, in milliseconds
-- Returns: id, extract.
SELECT id, extract(epoch FROM now() - last_heartbeat_at)::float8 FROM workers
WHERE last_heartbeat_at > now() - $1 * interval '1 millisecond'
