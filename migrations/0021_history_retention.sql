-- 0021: history leaves by day. A day partition of task_history, with its twin of
-- attempt_history, leaves whole once every queue's retention for its status has
-- passed its whole day (internal/janitor); what a shorter retention expires earlier is
-- deleted in batches (delete_expired_history).
--
-- A day leaves in two steps, so that the live queue waits on it for milliseconds
-- only: taskforge_detach_history_day takes the day's partitions out of their parents
-- (a DETACH holds its parent's lock for no longer than the catalog change), then
-- taskforge_drop_detached_history counts what they held out of the tally, forgets
-- their idempotency keys and drops them, locking nothing the queue uses. A detached
-- day that was not dropped (a crash between the steps) is dropped by the next call.

-- taskforge_history_partitions: every day partition of task_history: its status, its
-- UTC day, its table and its attempt twin's, and the planner's estimate of its rows.
CREATE VIEW taskforge_history_partitions AS
SELECT substring(parent.relname FROM '^task_history_(.*)$') AS status,
    to_date(right(part.relname, 8), 'YYYYMMDD') AS day,
    part.relname::text AS task_partition,
    'attempt_' || substring(part.relname FROM '^task_(.*)$') AS attempt_partition,
    greatest(part.reltuples, 0)::bigint AS rows_estimate
FROM pg_inherits i
JOIN pg_class part ON part.oid = i.inhrelid
JOIN pg_class parent ON parent.oid = i.inhparent
WHERE i.inhparent IN ('task_history_done'::regclass, 'task_history_cancelled'::regclass,
        'task_history_dead'::regclass)
    AND part.relname ~ '_p[0-9]{8}$';

-- taskforge_detach_history_day(status, day): detaches the day partitions of status
-- (task and attempt) when no workflow task is in the task partition (a workflow
-- leaves whole, before its day: the caller deletes the finished ones first). Returns
-- 'detached', 'held' (workflow tasks remain) or 'gone' (no such partition). The
-- caller's lock_timeout bounds the wait for the parents' locks.
CREATE FUNCTION taskforge_detach_history_day(status text, day date) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    tparent text := 'task_history_' || status;
    aparent text := 'attempt_history_' || status;
    tpart   text := taskforge_history_partition_name(tparent, day);
    apart   text := taskforge_history_partition_name(aparent, day);
    held    boolean;
BEGIN
    IF status NOT IN ('done', 'cancelled', 'dead') THEN
        RAISE EXCEPTION 'no history of status %', status;
    END IF;
    PERFORM pg_advisory_xact_lock(7380998011216356210); -- as taskforge_ensure_history_partitions
    IF NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(quote_ident(tpart))) THEN
        RETURN 'gone';
    END IF;
    -- The parent first, as an insert routed through it takes it, then its partition.
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', tparent);
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE workflow_id IS NOT NULL)', tpart) INTO STRICT held;
    IF held THEN
        RETURN 'held';
    END IF;
    EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', tparent, tpart);
    IF EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(quote_ident(apart))) THEN
        EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', aparent);
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', aparent, apart);
    END IF;
    RETURN 'detached';
END $$;

-- taskforge_drop_detached_history(): drops every detached day of history (a table
-- named as a day partition that is no partition any more), each task table with its
-- attempt twin, after counting its tasks out of the tally as a DELETE would (a DROP
-- fires no trigger) and deleting their idempotency keys' reservations (the one
-- statement that decides what becomes of a key when its task goes). Returns one row
-- per day dropped, with how many tasks it held.
CREATE FUNCTION taskforge_drop_detached_history()
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
        EXECUTE format('DELETE FROM idempotency_keys k USING %I t WHERE t.idempotency_key IS NOT NULL '
            'AND k.queue = t.queue AND k.key = t.idempotency_key AND k.task_id = t.id', t.name);
        EXECUTE format('DROP TABLE IF EXISTS %I', apart);
        EXECUTE format('DROP TABLE %I', t.name);
        dropped_status := t.st;
        dropped_day := t.d;
        RETURN NEXT;
    END LOOP;
END $$;
