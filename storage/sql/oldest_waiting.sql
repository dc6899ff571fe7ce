-- name: oldest_waiting
-- oldest_waiting is, for each queue of $1, the age in seconds of its oldest task that
-- is due and not yet running: the head of its due pending and retry tasks (one probe of
-- tasks_queue_due_idx) or its oldest buffered task (bounded by the buffer's size),
-- whichever is older.
--
-- Parameters:
--   $1 text[]: the queues
-- Returns: name, extract.
SELECT q.name, extract(epoch FROM now() - least(
	(SELECT min(scheduled_at) FROM tasks WHERE queue = q.name AND status IN ('pending', 'retry')
		AND priority > 0 AND scheduled_at <= now()),
	(SELECT min(scheduled_at) FROM tasks WHERE queue = q.name AND status = 'claimed'
		AND scheduled_at <= now())))::float8
FROM unnest($1::text[]) AS q(name)
