-- 0034: a day of history leaves without touching its tasks' idempotency keys.
--
-- Since 0024 taskforge_drop_detached_history reserved each key of the day still inside
-- its queue's window (an UPDATE of its row) and deleted the others: with 100,000 keys
-- all reserved, 3.5-4.9 s of the drop, and a dead tuple per key. Now the drop leaves
-- the keys' rows as they are, and a key whose row has no reserved_until and whose task
-- no table holds any more is reserved by that row alone: until its created_at + its
-- queue's idempotency window, then free (idempotency_reservations and
-- free_expired_idempotency_keys read it so). The drop lists the day's keys in
-- idempotency_key_drops instead, an insert of a row per 500 keys or fewer, and the
-- janitor deletes the keys of a listed row once every window in it has ended, in
-- batches (delete_dropped_idempotency_keys). Rows reserved before this migration keep their
-- reserved_until and its meaning.

-- idempotency_key_drops: the keys of the tasks of dropped days of history, waiting for
-- their window to end. A row holds up to 500 keys of one queue (keys[i] was held by
-- task_ids[i]); created_max is the latest created_at of their tasks, so that the row
-- is due once created_max + the queue's window has passed.
CREATE TABLE idempotency_key_drops (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue       text        NOT NULL,
    created_max timestamptz NOT NULL,
    keys        text[]      NOT NULL,
    task_ids    uuid[]      NOT NULL
);

-- taskforge_drop_detached_history(): as in 0024, but a day's keys are listed in
-- idempotency_key_drops (one scan of the day's table, an insert of a row per 500
-- keys or fewer) instead of being reserved or deleted row by row.
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
        -- The day's keys, up to 500 to a row, in the table's order (about the order
        -- its tasks finished in): numbered as the scan meets them, without a sort
        -- (ordered by created_at, a sort of 100,000 keys spilled to disk and took a
        -- third of the statement).
        EXECUTE format('INSERT INTO idempotency_key_drops (queue, created_max, keys, task_ids) '
            'SELECT queue, max(created_at), array_agg(idempotency_key), array_agg(id) FROM ('
            'SELECT queue, idempotency_key, id, created_at, (row_number() OVER () - 1) / 500 AS chunk '
            'FROM %I WHERE idempotency_key IS NOT NULL) k GROUP BY queue, chunk', t.name);
        EXECUTE format('DROP TABLE IF EXISTS %I', apart);
        EXECUTE format('DROP TABLE %I', t.name);
        dropped_status := t.st;
        dropped_day := t.d;
        RETURN NEXT;
    END LOOP;
END $$;
