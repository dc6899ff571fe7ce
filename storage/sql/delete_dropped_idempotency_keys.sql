-- name: delete_dropped_idempotency_keys
-- delete_dropped_idempotency_keys takes up to $2 rows of idempotency_key_drops (the
-- keys of dropped days of history, migration 0034) whose every window has ended
-- before $1 (their queue's window from their latest task's creation; a queue that is
-- gone took its keys with it), oldest first, SKIP LOCKED for another janitor. Of each
-- row's keys still held by its task (task_id and no reserved_until: a key an enqueue
-- took since names another task), those whose own window has ended are deleted, and
-- any other (a key created after its task, which no enqueue does) is reserved until
-- its window ends, as a deleted task's key is; then the rows go. It answers how many
-- rows it took (lists) and how many keys it deleted (keys).
--
-- Parameters:
--   $1 timestamptz: now (the Store's clock; NULL: the database's now())
--   $2 int8: the most rows of idempotency_key_drops to take
-- Returns: lists, keys.
WITH due AS (
	SELECT d.id, d.queue, d.keys, d.task_ids, q.idempotency_window_ms * interval '1 millisecond' AS window_length
	FROM idempotency_key_drops d
	LEFT JOIN queues q ON q.name = d.queue
	WHERE q.name IS NULL
		OR d.created_max + q.idempotency_window_ms * interval '1 millisecond' <= coalesce($1::timestamptz, now())
	ORDER BY d.created_max
	LIMIT $2
	FOR UPDATE OF d SKIP LOCKED
), listed AS MATERIALIZED (
	-- Apart, and with the window already read, so that each key is one probe of
	-- idempotency_keys_pkey on (queue, key) (joined with the unnest and queues inline,
	-- the planner probed by queue alone and read the queue's every key per listed key).
	SELECT due.queue, u.key, u.task_id, due.window_length
	FROM due CROSS JOIN LATERAL unnest(due.keys, due.task_ids) AS u(key, task_id)
	WHERE due.window_length IS NOT NULL
), held AS (
	SELECT k.queue, k.key, k.created_at + l.window_length AS until
	FROM listed l
	JOIN idempotency_keys k ON k.queue = l.queue AND k.key = l.key
	WHERE k.task_id = l.task_id AND k.reserved_until IS NULL
), freed AS (
	DELETE FROM idempotency_keys k USING held
	WHERE k.queue = held.queue AND k.key = held.key AND held.until <= coalesce($1::timestamptz, now())
	RETURNING 1
), kept AS (
	UPDATE idempotency_keys k SET reserved_until = held.until FROM held
	WHERE k.queue = held.queue AND k.key = held.key AND held.until > coalesce($1::timestamptz, now())
), gone AS (
	DELETE FROM idempotency_key_drops d USING due WHERE d.id = due.id
)
SELECT (SELECT count(*) FROM due) AS lists, (SELECT count(*) FROM freed) AS keys
