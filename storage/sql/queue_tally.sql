-- name: queue_tally
-- queue_tally sums the totals and the deltas not folded yet of the queues $1 (NULL =
-- every queue): task counts by status, and attempt outcomes within the window, with the
-- window's length in seconds. Its cost is the number of such rows: a few per status and
-- per bucket, however many tasks the queues hold.
--
-- Parameters:
--   $1 text[]: the queues (NULL: every queue)
-- Returns: queue, metric, sum, extract.
WITH w AS (SELECT date_bin('10 seconds', now(), 'epoch') - interval '50 seconds' AS start)
SELECT c.queue, c.metric, sum(c.n)::bigint, extract(epoch FROM now() - w.start)::float8
FROM (
	SELECT queue, metric, bucket, n FROM queue_tally WHERE $1::text[] IS NULL OR queue = ANY($1)
	UNION ALL
	SELECT queue, metric, bucket, delta FROM queue_tally_delta WHERE $1::text[] IS NULL OR queue = ANY($1)
) c, w
WHERE c.bucket = '-infinity' OR c.bucket >= w.start
GROUP BY c.queue, c.metric, w.start
