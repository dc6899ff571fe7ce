-- 0019: retention per queue. queues.retention holds what a queue sets itself, per
-- final status: {"done_ms": n, "cancelled_ms": n, "dead_ms": n}, each n a number of
-- milliseconds (at least 60000) or null to keep that status forever; a key left out
-- takes serve's default (--retention for done and cancelled, forever for dead). So
-- every queue that existed before this migration follows serve's settings, as it did.
-- Adding a column with a constant default rewrites nothing.
ALTER TABLE queues ADD COLUMN retention jsonb NOT NULL DEFAULT '{}'::jsonb
	CONSTRAINT queues_retention_object CHECK (jsonb_typeof(retention) = 'object');

-- taskforge_retention_ms: how long a queue keeps its tasks of final status status
-- ('done', 'cancelled' or 'dead') after they finish, in milliseconds: the queue's own
-- setting when it has one, else default_ms; NULL = forever.
CREATE FUNCTION taskforge_retention_ms(retention jsonb, status text, default_ms bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT CASE WHEN retention ? (status || '_ms') THEN (retention ->> (status || '_ms'))::bigint
		ELSE default_ms END
$$;
