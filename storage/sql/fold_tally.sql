-- name: fold_tally
-- fold_tally moves up to $1 of the oldest deltas into queue_tally and returns how many
-- it moved. DELETE ... RETURNING takes each delta exactly once, whatever the number of
-- replicas folding; SKIP LOCKED lets them fold different deltas at once, and the
-- ordered upsert keeps two folders from deadlocking on the same totals.
--
-- Parameters:
--   $1 int8: the most deltas to fold
-- Returns: count.
WITH d AS (
	DELETE FROM queue_tally_delta WHERE id IN (
		SELECT id FROM queue_tally_delta ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
	RETURNING queue, metric, bucket, delta
), folded AS (
	INSERT INTO queue_tally AS t (queue, metric, bucket, n)
	SELECT queue, metric, bucket, sum(delta)::bigint FROM d
	GROUP BY queue, metric, bucket ORDER BY queue, metric, bucket
	ON CONFLICT (queue, metric, bucket) DO UPDATE SET n = t.n + EXCLUDED.n
)
SELECT count(*) FROM d
