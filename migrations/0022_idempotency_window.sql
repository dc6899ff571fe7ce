-- 0022: idempotency windows.
--
-- A queue's idempotency_window_ms (0 to 30 days; default 24 h) keeps an idempotency
-- key reserved until its row's created_at (the task's creation) + the window, even when
-- the task is deleted before then (a DLQ discard, retention). Deleting a task then
-- keeps its key's row and sets reserved_until instead of deleting the row
-- (taskforge_release_idempotency_keys, called by every statement that deletes tasks
-- with their keys); an enqueue with the key meanwhile answers duplicate_request naming
-- the task. Once reserved_until has passed the key is free: the next enqueue with it
-- takes the row over (enqueue_tasks' ON CONFLICT), and the janitor deletes the rows
-- nobody took, in batches (delete_expired_idempotency_keys, through
-- idempotency_keys_reserved_idx, which holds reserved rows only: a live key costs it
-- nothing).
ALTER TABLE queues ADD COLUMN idempotency_window_ms bigint NOT NULL DEFAULT 86400000
    CHECK (idempotency_window_ms BETWEEN 0 AND 2592000000);

-- delete_expired_idempotency_keys: reservations whose window has ended.
CREATE INDEX idempotency_keys_reserved_idx ON idempotency_keys (reserved_until)
    WHERE reserved_until IS NOT NULL;

-- taskforge_release_idempotency_keys(queues, keys, task_ids): the keys of deleted
-- tasks (one element per task: its queue, its idempotency key or NULL, its id), as of
-- now(). A key whose row still names the task stays reserved until created_at + its
-- queue's window when that is still to come, and goes otherwise. Returns how many rows
-- it kept.
CREATE FUNCTION taskforge_release_idempotency_keys(queues text[], keys text[], task_ids uuid[])
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    WITH gone AS (
        SELECT g.queue, g.key, g.task_id,
            k.created_at + q.idempotency_window_ms * interval '1 millisecond' AS until
        FROM unnest(queues, keys, task_ids) AS g(queue, key, task_id)
        JOIN idempotency_keys k ON k.queue = g.queue AND k.key = g.key AND k.task_id = g.task_id
        LEFT JOIN queues q ON q.name = g.queue
        WHERE g.key IS NOT NULL
    ), kept AS (
        UPDATE idempotency_keys k SET reserved_until = gone.until
        FROM gone
        WHERE k.queue = gone.queue AND k.key = gone.key AND k.task_id = gone.task_id
            AND gone.until > now()
        RETURNING 1
    ), dropped AS (
        DELETE FROM idempotency_keys k USING gone
        WHERE k.queue = gone.queue AND k.key = gone.key AND k.task_id = gone.task_id
            AND (gone.until IS NULL OR gone.until <= now())
    )
    SELECT count(*) FROM kept
$$;
