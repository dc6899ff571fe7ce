-- 0023: a task that finishes moves into history in the transaction that finishes it.
--
-- 0018 built history (task_history, attempt_history) and the reads go through both
-- tables; until now nothing moved a task there when it finished. Every transition
-- that finishes a task (ack, nack, reclaim, release, cancel, bulk cancel, the
-- workflow cascades) is an UPDATE of tasks that sets status to done, cancelled or
-- dead, so one statement-level trigger moves them all: after the statement, the
-- rows it left finished leave tasks with their attempts, in the same transaction.
-- A transition added later moves its tasks without knowing about history.
--
-- The move is the backfill's (move_finished_batch): task_history takes the row as it
-- is (same columns, same order), attempt_history each attempt with its task's status
-- and finished_at. The tally triggers count each row out of tasks and into history,
-- which leaves every count as it was (on a hot-path connection both stand aside).
-- A finishing UPDATE must set finished_at (every transition does): history's
-- partition key is NOT NULL.
--
-- Rows that a release before this one left finished in tasks stay until the mover
-- (package backfill) takes them; a statement that changes one of them (a replay
-- marking it) moves it too.

-- taskforge_move_to_history moves the finished tasks among ids, with their attempts,
-- from tasks into history and returns how many it moved.
CREATE FUNCTION taskforge_move_to_history(ids uuid[]) RETURNS bigint
LANGUAGE sql AS $$
    WITH moved AS (
        DELETE FROM tasks t WHERE t.id = ANY (ids) AND t.status IN ('done', 'cancelled', 'dead')
        RETURNING t.*
    ), history AS (
        INSERT INTO task_history SELECT * FROM moved RETURNING 1
    ), gone AS (
        -- before the cascade of the tasks' delete would take them
        DELETE FROM attempts a WHERE a.task_id IN (SELECT id FROM moved) RETURNING a.*
    ), attempt_rows AS (
        INSERT INTO attempt_history
        SELECT g.*, m.status, m.finished_at FROM gone g JOIN moved m ON m.id = g.task_id
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM history) + 0 * (SELECT count(*) FROM attempt_rows)
$$;

CREATE FUNCTION tasks_move_finished() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ids uuid[];
BEGIN
    SELECT array_agg(id) INTO ids FROM moved_new WHERE status IN ('done', 'cancelled', 'dead');
    IF ids IS NOT NULL THEN
        PERFORM taskforge_move_to_history(ids);
    END IF;
    RETURN NULL;
END $$;

-- On a hot-path connection (0013) the delete trigger stands aside as the insert and
-- update triggers do: a move (this trigger's, or the plain ack's own, which deletes
-- the task from tasks and inserts it into task_history) then counts nothing, and the
-- ack's inline deltas say executing to done.
CREATE OR REPLACE FUNCTION tally_tasks_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF tally_written_inline() THEN
        RETURN NULL;
    END IF;
    INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
    SELECT queue, status, '-infinity', -count(*) FROM tally_old GROUP BY queue, status;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_move_finished AFTER UPDATE ON tasks
    REFERENCING NEW TABLE AS moved_new FOR EACH STATEMENT EXECUTE FUNCTION tasks_move_finished();

-- The dashboard's recent push answers (recent_push_answers) read a queue's pushers'
-- attempts newest first, in attempts (attempts_finished_idx) and here; only pushed
-- attempts pay for this index.
CREATE INDEX attempt_history_push_idx ON attempt_history (queue, finished_at) WHERE worker_id LIKE 'push:%';

-- taskforge_ensure_history_partitions (0018) created a day partition with CREATE TABLE
-- ... PARTITION OF, which holds ACCESS EXCLUSIVE on its status's table (say
-- task_history_done) until the transaction ends: every move into history of that
-- status waited behind it, and behind the scan of the default partition. Now that
-- every finishing transition moves its task, a partition is always made apart and
-- then attached: ATTACH PARTITION holds SHARE UPDATE EXCLUSIVE on the parent, which
-- the moves' ROW EXCLUSIVE does not conflict with (the default partition, locked
-- while it is checked, takes no move of today's tasks). Same contract otherwise.
CREATE OR REPLACE FUNCTION taskforge_ensure_history_partitions(from_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    status    text;
    kind      record;
    day       date;
    parent    text;
    part      text;
    lo        timestamptz;
    hi        timestamptz;
    holds     boolean;
    moved     bigint;
    created   integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(7380998011216356210); -- 'fhistory' in ASCII, roughly
    FOR kind IN SELECT * FROM (VALUES ('task_history', 'finished_at'),
        ('attempt_history', 'task_finished_at')) AS k(tbl, col) LOOP
        FOREACH status IN ARRAY ARRAY['done', 'cancelled', 'dead'] LOOP
            parent := kind.tbl || '_' || status;
            FOR i IN 0 .. days - 1 LOOP
                day := from_day + i;
                part := taskforge_history_partition_name(parent, day);
                IF to_regclass(quote_ident(part)) IS NOT NULL THEN
                    CONTINUE;
                END IF;
                lo := day::timestamp AT TIME ZONE 'UTC';
                hi := (day + 1)::timestamp AT TIME ZONE 'UTC';
                EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS)', part, parent);
                -- the range as a constraint, so that the attach need not scan the table
                EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I >= %L AND %I < %L)',
                    part, part || '_range', kind.col, lo, kind.col, hi);
                EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE %I >= $1 AND %I < $2)',
                    parent || '_default', kind.col, kind.col) INTO STRICT holds USING lo, hi;
                IF holds THEN
                    EXECUTE format('WITH m AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING *) '
                        'INSERT INTO %I SELECT * FROM m', parent || '_default', kind.col, kind.col, part)
                        USING lo, hi;
                    GET DIAGNOSTICS moved = ROW_COUNT;
                    RAISE NOTICE 'history partition %: % rows moved from % into it', part, moved,
                        parent || '_default';
                END IF;
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                    parent, part, lo, hi);
                EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, part || '_range');
                created := created + 1;
            END LOOP;
        END LOOP;
    END LOOP;
    RETURN created;
END $$;
