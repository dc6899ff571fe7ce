-- 0024: a day of history that leaves whole keeps its tasks' idempotency keys reserved
-- for their queue's idempotency window, as every other deletion of a task does (0022).
--
-- 0021's taskforge_drop_detached_history deleted the keys of the tasks it dropped, so
-- a producer retrying within the window created the work again once its task's day
-- had been dropped. It now applies taskforge_release_idempotency_keys' rule, which
-- decides what becomes of a key when its task goes: reserved until its row's
-- created_at + the queue's window when that is still to come, deleted otherwise (and
-- with its queue gone). One set-based statement per dropped day, reading the detached
-- table once, as the DELETE it replaces did. A key whose window has passed costs what
-- it did (a delete); one still reserved costs an update of its row (docs/benchmarks.md
-- has both).
CREATE OR REPLACE FUNCTION taskforge_drop_detached_history()
RETURNS TABLE (dropped_status text, dropped_day date, dropped_tasks bigint)
LANGUAGE plpgsql AS $$
DECLARE
    t     record;
    apart text;
BEGIN
    PERFORM pg_advisory_xact_lock(7380998011216356210); -- as taskforge_ensure_history_partitions
    FOR t IN SELECT c.relname::text AS name, substring(c.relname FROM '^task_history_([a-z]+)_p') AS st,
            to_date(right(c.relname, 8), 'YYYYMMDD') AS d
        FROM pg_class c
        WHERE c.relname ~ '^task_history_(done|cancelled|dead)_p[0-9]{8}$' AND c.relkind = 'r'
            AND NOT c.relispartition
            AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'task_history'::regclass)
        ORDER BY 3, 2
    LOOP
        apart := 'attempt_' || substring(t.name FROM '^task_(.*)$');
        EXECUTE format('WITH c AS (SELECT queue, status, count(*) AS n FROM %I GROUP BY queue, status), '
            'ins AS (INSERT INTO queue_tally_delta (queue, metric, bucket, delta) '
            'SELECT queue, status, ''-infinity'', -n FROM c) '
            'SELECT coalesce(sum(n), 0)::bigint FROM c', t.name) INTO STRICT dropped_tasks;
        -- taskforge_release_idempotency_keys' rule, joined to the day's table whole
        -- (a hash join, not one probe per key from an array); keys already reserved
        -- (a release that ran before a crash) keep their end.
        EXECUTE format('WITH gone AS ('
            'SELECT k.queue, k.key, k.created_at + q.idempotency_window_ms * interval ''1 millisecond'' AS until '
            'FROM %I t JOIN idempotency_keys k ON k.queue = t.queue AND k.key = t.idempotency_key AND k.task_id = t.id '
            'LEFT JOIN queues q ON q.name = t.queue '
            'WHERE t.idempotency_key IS NOT NULL AND k.reserved_until IS NULL'
            '), kept AS ('
            'UPDATE idempotency_keys k SET reserved_until = gone.until FROM gone '
            'WHERE k.queue = gone.queue AND k.key = gone.key AND gone.until > now() RETURNING 1'
            ') '
            'DELETE FROM idempotency_keys k USING gone '
            'WHERE k.queue = gone.queue AND k.key = gone.key AND (gone.until IS NULL OR gone.until <= now()) '
            'AND (SELECT count(*) FROM kept) >= 0', t.name);
        EXECUTE format('DROP TABLE IF EXISTS %I', apart);
        EXECUTE format('DROP TABLE %I', t.name);
        dropped_status := t.st;
        dropped_day := t.d;
        RETURN NEXT;
    END LOOP;
END $$;
