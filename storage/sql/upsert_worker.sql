-- name: upsert_worker
--
-- Parameters:
--   $1 text: id
--   $2 text[]: queues
-- Returns: no rows.
INSERT INTO workers (id, queues, last_heartbeat_at) VALUES ($1, $2, now())
ON CONFLICT (id) DO UPDATE SET last_heartbeat_at = now(),
	queues = CASE WHEN cardinality(EXCLUDED.queues) > 0 THEN EXCLUDED.queues ELSE workers.queues END
