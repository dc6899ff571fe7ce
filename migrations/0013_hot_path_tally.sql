-- 0013: count deltas written by the statements of a task's hot path.
--
-- The statement-level triggers of 0008 cost every statement that changes tasks or
-- attempts a PL/pgSQL call and a query over its transition tables, about 0.15 ms of
-- PostgreSQL CPU per statement: as much as the single-row claim itself once it is
-- planned once. The statements on every task's path (the enqueue, the claim, the ack
-- of a task outside a workflow) now append their own deltas in a CTE, guarded by the
-- session setting taskforge.tally = 'inline', which only the connections of serve's
-- hot-path pool set (storage.HotPathSettings). On those connections the triggers
-- stand aside; on every other connection (the main pool, behind a transaction
-- pooler, psql, a replica of the previous release) the CTEs write nothing and the
-- triggers count as before. Either way each change is counted exactly once. No
-- hot-path statement deletes tasks, so the delete trigger always counts.

-- tally_written_inline: is this session one whose statements append their own
-- deltas? (The planner inlines it: the guard costs a hot-path statement nothing.)
CREATE FUNCTION tally_written_inline() RETURNS boolean LANGUAGE sql STABLE
    AS $$ SELECT coalesce(current_setting('taskforge.tally', true) = 'inline', false) $$;

CREATE OR REPLACE FUNCTION tally_tasks_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF tally_written_inline() THEN
        RETURN NULL;
    END IF;
    INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
    SELECT queue, status, '-infinity', count(*) FROM tally_new GROUP BY queue, status;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION tally_tasks_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF tally_written_inline() THEN
        RETURN NULL;
    END IF;
    INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
    SELECT queue, status, '-infinity', sum(d) FROM (
        SELECT queue, status, count(*) AS d FROM tally_new GROUP BY queue, status
        UNION ALL
        SELECT queue, status, -count(*) FROM tally_old GROUP BY queue, status
    ) c
    GROUP BY queue, status
    HAVING sum(d) <> 0;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION tally_attempts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF tally_written_inline() THEN
        RETURN NULL;
    END IF;
    INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
    SELECT queue, metric, bucket, sum(d) FROM (
        SELECT queue, 'attempt:' || status AS metric,
            date_bin('10 seconds', finished_at, 'epoch') AS bucket, count(*) AS d
        FROM tally_new WHERE status <> 'executing' AND finished_at IS NOT NULL
        GROUP BY 1, 2, 3
        UNION ALL
        SELECT queue, 'attempt:' || status, date_bin('10 seconds', finished_at, 'epoch'), -count(*)
        FROM tally_old WHERE status <> 'executing' AND finished_at IS NOT NULL
        GROUP BY 1, 2, 3
    ) c
    GROUP BY queue, metric, bucket
    HAVING sum(d) <> 0;
    RETURN NULL;
END $$;
