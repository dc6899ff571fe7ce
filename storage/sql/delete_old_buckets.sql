-- name: delete_old_buckets
-- delete_old_buckets deletes attempt-outcome buckets older than $1 ms (the totals of
-- task statuses stay).
--
-- Parameters:
--   $1 float8: the age in milliseconds past which a bucket goes
-- Returns: no rows.
DELETE FROM queue_tally WHERE bucket <> '-infinity'
	AND bucket < now() - $1 * interval '1 millisecond'
