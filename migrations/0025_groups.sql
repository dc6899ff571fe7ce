-- 0025: fair queues' groups (issue 36): the task's group, the queue's group defaults,
-- per-group overrides, per-group counts, and the index of each group's due head.
--
-- tasks.group_key names the task's group (a tenant, a customer…; 1..200 characters of
-- [A-Za-z0-9._:@-]); NULL is the queue's unnamed group. ("group" is reserved in SQL,
-- hence the name.) It never changes after the enqueue, except when a debounce replaces
-- the waiting task (enqueue_debounced). task_history keeps the columns of tasks in the
-- same order (0018), so both gain it and all_tasks is re-created (a view's * is
-- expanded when it is created). all_attempts lists its columns and is unchanged.
--
-- The new columns have no default: adding them rewrites nothing.
ALTER TABLE tasks ADD COLUMN group_key text;
ALTER TABLE task_history ADD COLUMN group_key text;

-- A schedule's ticks carry its group_key.
ALTER TABLE schedules ADD COLUMN group_key text;

CREATE OR REPLACE VIEW all_tasks AS
    SELECT * FROM tasks
    UNION ALL
    SELECT * FROM task_history;

-- A queue's fairness and its defaults for each of its groups; NULL = off.
--   fairness: NULL (one line: priority, then eligible time) or 'round_robin' (within
--     the best priority level with due work, groups take weighted turns).
--   group_max_concurrency: at most this many executing tasks per group.
--   group_rate_limit (tasks/s) and group_rate_burst: a token bucket per group (the
--     burst defaults to the rate's ceiling, as rate_burst does).
ALTER TABLE queues
    ADD COLUMN fairness text CONSTRAINT queues_fairness_check CHECK (fairness IN ('round_robin')),
    ADD COLUMN group_max_concurrency integer CHECK (group_max_concurrency >= 1),
    ADD COLUMN group_rate_limit double precision CHECK (group_rate_limit > 0),
    ADD COLUMN group_rate_burst integer CHECK (group_rate_burst >= 1);

-- Per-group overrides of the queue's defaults (PUT /queues/:name/groups/:group); a
-- NULL setting keeps the queue's default (weight: 1). A row exists only while a group
-- has overrides; its tasks never need one. They go with their queue.
CREATE TABLE queue_groups (
    queue           text        NOT NULL REFERENCES queues (name) ON DELETE CASCADE,
    group_key       text        NOT NULL,
    weight          integer     CHECK (weight BETWEEN 1 AND 1000),
    max_concurrency integer     CHECK (max_concurrency >= 1),
    rate_limit      double precision CHECK (rate_limit > 0),
    rate_burst      integer     CHECK (rate_burst >= 1),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, group_key)
);

-- Per-group counts, without counting rows (as 0008 keeps per-queue counts): every change
-- of a named group's task count by status is appended to group_tally_delta in the
-- changing statement's own transaction, so the figures are exact whatever path changed
-- a row; a fold (storage.FoldGroupTally, beside FoldTally) moves the deltas into
-- group_tally in batches, each exactly once, and readers add the deltas not folded yet.
--
-- Why row triggers with a WHEN clause, not 0008's statement triggers or 0013's inline
-- CTEs: the WHEN clause is evaluated without calling any function, so a task of the
-- unnamed group (every task of a queue that does not use groups) costs nothing at all,
-- on every connection, and no statement of the hot path needs to know about groups. A
-- named group's task pays one PL/pgSQL call and one appended row per change of its
-- status (enqueue, dispatch, claim, end; never a heartbeat). Appending never waits on
-- another transaction, so a busy group's counts are no hot row.
--
-- Only the statuses a group object shows are kept: pending, blocked, claimed
-- (buffered), executing, retry and dead; a group's row leaves group_tally when every
-- count is back to 0, so the table holds the groups with unfinished or dead work only.
CREATE TABLE group_tally (
    queue     text   NOT NULL,
    group_key text   NOT NULL,
    pending   bigint NOT NULL DEFAULT 0,
    blocked   bigint NOT NULL DEFAULT 0,
    claimed   bigint NOT NULL DEFAULT 0,
    executing bigint NOT NULL DEFAULT 0,
    retry     bigint NOT NULL DEFAULT 0,
    dead      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, group_key)
);
-- GET /queues/:name/groups?active=true: a queue's groups with pending, claimed or
-- executing tasks, by name, without visiting the others.
CREATE INDEX group_tally_active_idx ON group_tally (queue, group_key)
    WHERE pending + claimed + executing > 0;

CREATE TABLE group_tally_delta (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- the fold takes the oldest first
    queue     text   NOT NULL,
    group_key text   NOT NULL,
    status    text   NOT NULL,
    delta     integer NOT NULL
);
-- Readers add a group's (or a queue's) deltas not folded yet.
CREATE INDEX group_tally_delta_group_idx ON group_tally_delta (queue, group_key);

-- group_tally_changed: a row trigger's delta, -1 for the old row's status and +1 for
-- the new row's, each when it names a group and its status is counted.
CREATE FUNCTION group_tally_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.group_key IS NOT NULL
        AND OLD.status IN ('pending', 'blocked', 'claimed', 'executing', 'retry', 'dead') THEN
        INSERT INTO group_tally_delta (queue, group_key, status, delta)
        VALUES (OLD.queue, OLD.group_key, OLD.status, -1);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.group_key IS NOT NULL
        AND NEW.status IN ('pending', 'blocked', 'claimed', 'executing', 'retry', 'dead') THEN
        INSERT INTO group_tally_delta (queue, group_key, status, delta)
        VALUES (NEW.queue, NEW.group_key, NEW.status, 1);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_group_tally_insert AFTER INSERT ON tasks FOR EACH ROW
    WHEN (NEW.group_key IS NOT NULL) EXECUTE FUNCTION group_tally_changed();
CREATE TRIGGER tasks_group_tally_update AFTER UPDATE OF status, group_key ON tasks FOR EACH ROW
    WHEN ((OLD.group_key IS NOT NULL OR NEW.group_key IS NOT NULL)
        AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.group_key IS DISTINCT FROM NEW.group_key))
    EXECUTE FUNCTION group_tally_changed();
CREATE TRIGGER tasks_group_tally_delete AFTER DELETE ON tasks FOR EACH ROW
    WHEN (OLD.group_key IS NOT NULL) EXECUTE FUNCTION group_tally_changed();
-- History holds finished tasks; of those only the dead are counted.
CREATE TRIGGER task_history_group_tally_insert AFTER INSERT ON task_history FOR EACH ROW
    WHEN (NEW.group_key IS NOT NULL AND NEW.status = 'dead') EXECUTE FUNCTION group_tally_changed();
CREATE TRIGGER task_history_group_tally_delete AFTER DELETE ON task_history FOR EACH ROW
    WHEN (OLD.group_key IS NOT NULL AND OLD.status = 'dead') EXECUTE FUNCTION group_tally_changed();

-- The dispatcher's per-group heads in a fair queue: for each priority level, each
-- group's due tasks in eligible-time order (a skip over the distinct groups of a
-- level, then a short read of each), so that one group's backlog never hides another
-- group's head. The unnamed group (NULL) is in it too. It holds the waiting rows only
-- (the predicate of tasks_dispatch_idx, so a read that says status = 'pending' may use
-- it too); for a queue without groups it costs one more index entry per waiting task.
CREATE INDEX tasks_group_dispatch_idx ON tasks (queue, priority, group_key, scheduled_at)
    WHERE status IN ('pending', 'retry');
