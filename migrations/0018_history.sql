-- 0018: history apart from the hot queue (structures; the moves come with the
-- statements that finish tasks).
--
-- tasks keeps the unfinished work (pending, blocked, claimed, executing, retry);
-- finished tasks (done, cancelled, dead) live in task_history and their attempts in
-- attempt_history, each partitioned by status, then by day of finishing, so that a
-- day of one status leaves by dropping a partition, tasks and attempts together:
--
--   task_history                         LIST (status)
--     task_history_<status>              RANGE (finished_at), <status> in done,
--       task_history_<status>_pYYYYMMDD  cancelled, dead: one partition per UTC day,
--       task_history_<status>_default    and a default for days not created yet
--   attempt_history                      LIST (task_status), then RANGE
--     attempt_history_<status>_...       (task_finished_at), the same way
--
-- task_history has the columns of tasks, same names, types and order, so a move is
-- "INSERT INTO task_history SELECT * FROM (DELETE FROM tasks ... RETURNING *)".
-- attempt_history has the columns of attempts plus the task's status and finished_at
-- (its partition keys). A column added to tasks (or attempts) must be added to its
-- history table in the same migration, and the views below re-created.
--
-- Nothing here takes a lock that waits on the live queue: the new tables start empty,
-- the views and the keys table are new; the backfill of the keys reads tasks.

CREATE TABLE task_history (LIKE tasks INCLUDING DEFAULTS) PARTITION BY LIST (status);
ALTER TABLE task_history ALTER COLUMN finished_at SET NOT NULL;

CREATE TABLE attempt_history (LIKE attempts INCLUDING DEFAULTS, task_status text NOT NULL,
    task_finished_at timestamptz NOT NULL) PARTITION BY LIST (task_status);

CREATE TABLE task_history_done PARTITION OF task_history FOR VALUES IN ('done')
    PARTITION BY RANGE (finished_at);
CREATE TABLE task_history_cancelled PARTITION OF task_history FOR VALUES IN ('cancelled')
    PARTITION BY RANGE (finished_at);
CREATE TABLE task_history_dead PARTITION OF task_history FOR VALUES IN ('dead')
    PARTITION BY RANGE (finished_at);
CREATE TABLE task_history_done_default PARTITION OF task_history_done DEFAULT;
CREATE TABLE task_history_cancelled_default PARTITION OF task_history_cancelled DEFAULT;
CREATE TABLE task_history_dead_default PARTITION OF task_history_dead DEFAULT;

CREATE TABLE attempt_history_done PARTITION OF attempt_history FOR VALUES IN ('done')
    PARTITION BY RANGE (task_finished_at);
CREATE TABLE attempt_history_cancelled PARTITION OF attempt_history FOR VALUES IN ('cancelled')
    PARTITION BY RANGE (task_finished_at);
CREATE TABLE attempt_history_dead PARTITION OF attempt_history FOR VALUES IN ('dead')
    PARTITION BY RANGE (task_finished_at);
CREATE TABLE attempt_history_done_default PARTITION OF attempt_history_done DEFAULT;
CREATE TABLE attempt_history_cancelled_default PARTITION OF attempt_history_cancelled DEFAULT;
CREATE TABLE attempt_history_dead_default PARTITION OF attempt_history_dead DEFAULT;

-- GET /queues/:q/tasks/:id, replay, discard: a task by id (not unique: a unique index
-- of a partitioned table must hold its partition keys; ids are unique by making).
CREATE INDEX task_history_id_idx ON task_history (id);
-- listTasks with or without a status filter: one probe per status, newest first.
CREATE INDEX task_history_list_idx ON task_history (queue, status, created_at DESC, id DESC);
-- listDead: a queue's dead letters, most recently died first.
CREATE INDEX task_history_dead_idx ON task_history_dead (queue, finished_at DESC, id DESC);
-- getWorkflow, the workflow cascades and workflow retention: a workflow's tasks.
CREATE INDEX task_history_workflow_idx ON task_history (workflow_id) WHERE workflow_id IS NOT NULL;
-- taskAttempts: a task's attempts in order.
CREATE INDEX attempt_history_task_idx ON attempt_history (task_id, attempt);

-- Counts stay exact (0008, 0013): rows entering or leaving history are counted by
-- status as rows of tasks are, by the same functions, which stand aside on a hot-path
-- connection whose statements append their own deltas. Attempt outcomes are counted
-- when an attempt ends, which happens in attempts (or in the move's own statement),
-- never by entering history.
CREATE TRIGGER task_history_tally_insert AFTER INSERT ON task_history
    REFERENCING NEW TABLE AS tally_new FOR EACH STATEMENT EXECUTE FUNCTION tally_tasks_inserted();
CREATE TRIGGER task_history_tally_delete AFTER DELETE ON task_history
    REFERENCING OLD TABLE AS tally_old FOR EACH STATEMENT EXECUTE FUNCTION tally_tasks_deleted();

-- Reads that may meet a finished task read these. Each side keeps its own indexes:
-- a filter on id, or on queue and status, is pushed into both.
CREATE VIEW all_tasks AS
    SELECT * FROM tasks
    UNION ALL
    SELECT * FROM task_history;

CREATE VIEW all_attempts AS
    SELECT task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at, error
    FROM attempts
    UNION ALL
    SELECT task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at, error
    FROM attempt_history;

-- Idempotency keys, reserved by the enqueue (a unique index of tasks can no longer
-- span the live tasks and their partitioned history). A key's row goes when its task
-- is deleted (a discard, retention, a queue's deletion). reserved_until: NULL, the key
-- is held as long as its task exists.
CREATE TABLE idempotency_keys (
    queue          text        NOT NULL,
    key            text        NOT NULL,
    task_id        uuid        NOT NULL,
    fingerprint    bytea,
    created_at     timestamptz NOT NULL DEFAULT now(),
    reserved_until timestamptz NULL,
    PRIMARY KEY (queue, key)
);

INSERT INTO idempotency_keys (queue, key, task_id, fingerprint, created_at)
SELECT queue, idempotency_key, id, fingerprint, created_at FROM tasks
WHERE idempotency_key IS NOT NULL
ON CONFLICT DO NOTHING;

-- taskforge_history_partition_name: the name of the day partition of table (one of
-- the six RANGE-partitioned tables above) holding day.
CREATE FUNCTION taskforge_history_partition_name(parent text, day date) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT parent || '_p' || to_char(day, 'YYYYMMDD') $$;

-- taskforge_ensure_history_partitions(from_day, days): creates the day partitions of
-- the six RANGE-partitioned history tables for the UTC days [from_day,
-- from_day + days) that do not exist yet, and returns how many it created. Idempotent,
-- and serialised among concurrent callers (a transaction-scoped advisory lock). When
-- a default partition already holds rows of a day being created, they move into the
-- new partition in the same transaction (it is created apart, filled, then attached),
-- and a NOTICE says how many.
CREATE FUNCTION taskforge_ensure_history_partitions(from_day date, days integer) RETURNS integer
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
                EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE %I >= $1 AND %I < $2)',
                    parent || '_default', kind.col, kind.col) INTO STRICT holds USING lo, hi;
                IF NOT holds THEN
                    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                        part, parent, lo, hi);
                ELSE
                    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS)', part, parent);
                    EXECUTE format('WITH m AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING *) '
                        'INSERT INTO %I SELECT * FROM m', parent || '_default', kind.col, kind.col, part)
                        USING lo, hi;
                    GET DIAGNOSTICS moved = ROW_COUNT;
                    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                        parent, part, lo, hi);
                    RAISE NOTICE 'history partition %: % rows moved from % into it', part, moved,
                        parent || '_default';
                END IF;
                created := created + 1;
            END LOOP;
        END LOOP;
    END LOOP;
    RETURN created;
END $$;

SELECT taskforge_ensure_history_partitions((now() AT TIME ZONE 'UTC')::date - 1, 10);
