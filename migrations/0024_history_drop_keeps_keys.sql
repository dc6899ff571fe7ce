-- 0024: a day of history that leaves whole keeps its tasks' idempotency keys reserved
-- for their queue's idempotency window, as every other deletion of a task does (0022).
--
-- 0021's taskforge_drop_detached_history deleted the keys of the tasks it dropped, so
-- a producer retrying within the window created the work again once its task's day
-- had been dropped. It now applies taskforge_release_idempotency_keys' rule, which
-- decides what becomes of a key when its task goes: reserved until its row's
-- created_at + the queue's window when that is still to come, deleted otherwise (and
-- with its queue gone). Set-based, as the DELETE it replaces: a key whose window has
-- passed costs what it did (a delete); one still inside it costs an update of its row
-- (docs/benchmarks.md has both).
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
        -- taskforge_release_idempotency_keys' rule, as two statements joined to the
        -- day's table whole (hash joins, not one probe per key): first the keys still
        -- inside their queue's window are reserved until it ends, then the rest of the
        -- day's keys (window ended, or queue gone) are deleted. A key already reserved
        -- (a release that ran before a crash) keeps its end.
        EXECUTE format('UPDATE idempotency_keys k '
            'SET reserved_until = k.created_at + q.idempotency_window_ms * interval ''1 millisecond'' '
            'FROM %I t JOIN queues q ON q.name = t.queue '
            'WHERE t.idempotency_key IS NOT NULL AND k.queue = t.queue AND k.key = t.idempotency_key '
            'AND k.task_id = t.id AND k.reserved_until IS NULL '
            'AND k.created_at + q.idempotency_window_ms * interval ''1 millisecond'' > now()', t.name);
        EXECUTE format('DELETE FROM idempotency_keys k USING %I t '
            'WHERE t.idempotency_key IS NOT NULL AND k.queue = t.queue AND k.key = t.idempotency_key '
            'AND k.task_id = t.id AND k.reserved_until IS NULL', t.name);
        EXECUTE format('DROP TABLE IF EXISTS %I', apart);
        EXECUTE format('DROP TABLE %I', t.name);
        dropped_status := t.st;
        dropped_day := t.d;
        RETURN NEXT;
    END LOOP;
END $$;
