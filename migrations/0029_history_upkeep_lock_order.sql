-- 0029: history's partition upkeep can no longer deadlock with moves into history or
-- with another replica's upkeep.
--
-- Making a day partition ends with ALTER TABLE parent ATTACH PARTITION, which holds
-- ACCESS EXCLUSIVE on the parent's default partition until the transaction ends; a
-- move into history routed to that default (its day has no partition) holds ROW
-- EXCLUSIVE on it until its own transaction ends. Until now the upkeep took those
-- locks one table after another (task_history_<status>_default, then
-- attempt_history_<status>_default), each when it reached it, after deleting the
-- day's rows out of it (ROW EXCLUSIVE first, ACCESS EXCLUSIVE later: an upgrade), so
-- it held one default while waiting for the next. A transaction holding the second
-- (its attempts routed there) and then wanting the first made a cycle, and PostgreSQL
-- broke it with "deadlock detected". And ensure_history_partitions scanned the six
-- defaults (ACCESS SHARE) before the upkeep's advisory lock: two replicas' upkeeps at
-- once each held what the other's ATTACH needed while one waited on the advisory lock.
--
-- Now:
--   * taskforge_history_upkeep(today, days) takes the advisory lock first, then looks
--     at the defaults, so a second upkeep waits holding nothing;
--   * taskforge_make_history_partitions(days) locks every default it will attach
--     into, ACCESS EXCLUSIVE, before it touches any of them, in one subtransaction:
--     it waits (lock_timeout, wait_ms) for one of them only, while it holds none, and
--     takes the others with NOWAIT. When one is busy the subtransaction rolls back,
--     releasing what it took, and the next try waits for that one first. It never
--     waits while holding a lock a move may want, so it is never part of a cycle:
--     moves wait on it at most for the catalog change and the move out of the
--     default, never the other way round. After `tries` busy tries it raises
--     lock_not_available (55P03), which the janitor treats as "next sweep".
-- Only the defaults of the parents that get a partition are locked: a sweep that
-- creates nothing locks nothing.

-- taskforge_make_history_partitions(days, wait_ms, tries): creates the day
-- partitions of the six RANGE-partitioned history tables for each UTC day of days
-- that does not have them yet, moving the rows a default partition holds for that
-- day into it, and returns how many it created. The caller holds the upkeep's
-- advisory lock.
CREATE FUNCTION taskforge_make_history_partitions(days date[], wait_ms integer DEFAULT 200,
    tries integer DEFAULT 50) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    parents  text[] := '{}';
    cols     text[] := '{}';
    parts    text[] := '{}';
    los      timestamptz[] := '{}';
    his      timestamptz[] := '{}';
    defaults text[];
    kind     record;
    status   text;
    day      date;
    parent   text;
    first    text;
    cur      text;
    saved    text := current_setting('lock_timeout');
    moved    bigint;
    try      integer := 0;
BEGIN
    FOR kind IN SELECT * FROM (VALUES ('task_history', 'finished_at'),
        ('attempt_history', 'task_finished_at')) AS k(tbl, col) LOOP
        FOREACH status IN ARRAY ARRAY['done', 'cancelled', 'dead'] LOOP
            parent := kind.tbl || '_' || status;
            FOR day IN SELECT DISTINCT d FROM unnest(days) AS d WHERE d IS NOT NULL ORDER BY d LOOP
                IF to_regclass(quote_ident(taskforge_history_partition_name(parent, day))) IS NULL THEN
                    parents := parents || parent;
                    cols := cols || kind.col::text;
                    parts := parts || taskforge_history_partition_name(parent, day);
                    los := los || (day::timestamp AT TIME ZONE 'UTC');
                    his := his || ((day + 1)::timestamp AT TIME ZONE 'UTC');
                END IF;
            END LOOP;
        END LOOP;
    END LOOP;
    IF cardinality(parts) = 0 THEN
        RETURN 0;
    END IF;
    SELECT array_agg(DISTINCT p || '_default' ORDER BY p || '_default') INTO defaults FROM unnest(parents) AS p;
    LOOP
        try := try + 1;
        BEGIN
            PERFORM set_config('lock_timeout', wait_ms::text, true);
            -- Wait for one default only, holding none: the one busy last time, or the first.
            cur := coalesce(first, defaults[1]);
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', cur);
            FOREACH cur IN ARRAY defaults LOOP
                IF cur <> coalesce(first, defaults[1]) THEN
                    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE NOWAIT', cur);
                END IF;
            END LOOP;
            PERFORM set_config('lock_timeout', saved, true);
            FOR i IN 1 .. cardinality(parts) LOOP
                EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS)', parts[i], parents[i]);
                -- the range as a constraint, so that the attach need not scan the table
                EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I >= %L AND %I < %L)',
                    parts[i], parts[i] || '_range', cols[i], los[i], cols[i], his[i]);
                EXECUTE format('WITH m AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING *) '
                    'INSERT INTO %I SELECT * FROM m', parents[i] || '_default', cols[i], cols[i], parts[i])
                    USING los[i], his[i];
                GET DIAGNOSTICS moved = ROW_COUNT;
                IF moved > 0 THEN
                    RAISE NOTICE 'history partition %: % rows moved from % into it', parts[i], moved,
                        parents[i] || '_default';
                END IF;
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                    parents[i], parts[i], los[i], his[i]);
                EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', parts[i], parts[i] || '_range');
            END LOOP;
            RETURN cardinality(parts);
        EXCEPTION WHEN lock_not_available THEN
            PERFORM set_config('lock_timeout', saved, true);
            IF try >= tries THEN
                RAISE EXCEPTION 'history partitions: % stayed busy through % tries', cur, tries
                    USING ERRCODE = 'lock_not_available';
            END IF;
            first := cur;
        END;
    END LOOP;
END $$;

-- taskforge_ensure_history_partitions(from_day, days): as in 0023 (the days
-- [from_day, from_day + days) that have no partitions get them, rows of those days
-- move out of the defaults), in the lock order above.
CREATE OR REPLACE FUNCTION taskforge_ensure_history_partitions(from_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(7380998011216356210); -- 'fhistory' in ASCII, roughly
    RETURN taskforge_make_history_partitions(ARRAY(SELECT from_day + i FROM generate_series(0, days - 1) AS i));
END $$;

-- taskforge_history_upkeep(today, days): the janitor's upkeep: the partitions of the
-- days [today, today + days), and of every day of which a default partition holds
-- rows (which move into them). The advisory lock comes before the defaults are read.
CREATE FUNCTION taskforge_history_upkeep(today date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(7380998011216356210); -- as taskforge_ensure_history_partitions
    RETURN taskforge_make_history_partitions(ARRAY(
        SELECT today + i FROM generate_series(0, days - 1) AS i
        UNION
        SELECT (f AT TIME ZONE 'UTC')::date FROM (
            SELECT finished_at AS f FROM task_history_done_default
            UNION ALL SELECT finished_at FROM task_history_cancelled_default
            UNION ALL SELECT finished_at FROM task_history_dead_default
            UNION ALL SELECT task_finished_at FROM attempt_history_done_default
            UNION ALL SELECT task_finished_at FROM attempt_history_cancelled_default
            UNION ALL SELECT task_finished_at FROM attempt_history_dead_default
        ) defaults));
END $$;
