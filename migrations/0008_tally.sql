-- 0008: costs that follow the work.
--
-- Counts without counting. Every queue's task count by status and its attempt
-- outcomes per 10-second bucket are kept incrementally, so that stats, /metrics and
-- the dashboard never count a queue's rows.
--
-- Statement-level triggers on tasks and attempts append what each statement changed
-- to queue_tally_delta, in the statement's own transaction: the figures are exact
-- whatever path changed a row (API, dispatcher, watchdog, retention, a discard, the
-- cascade of a queue deletion, a crash that rolls a transaction back). Appending
-- never waits on another transaction, so the counters are no hot row: a fold
-- (storage.FoldTally, run every second by internal/tally on each replica) moves the
-- deltas into queue_tally in batches, each delta exactly once (DELETE ... RETURNING),
-- and readers add the few deltas not folded yet.

CREATE TABLE queue_tally (
    queue  text        NOT NULL,
    -- A task status ('pending', ...), or 'attempt:' and an attempt's final status.
    metric text        NOT NULL,
    -- '-infinity' for task statuses; for attempt outcomes the start of the
    -- 10-second bucket in which the attempt finished.
    bucket timestamptz NOT NULL,
    n      bigint      NOT NULL,
    PRIMARY KEY (queue, metric, bucket)
);

CREATE TABLE queue_tally_delta (
    id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- FoldTally takes the oldest first
    queue  text        NOT NULL,
    metric text        NOT NULL,
    bucket timestamptz NOT NULL,
    delta  bigint      NOT NULL
);

CREATE FUNCTION tally_tasks_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
    SELECT queue, status, '-infinity', count(*) FROM tally_new GROUP BY queue, status;
    RETURN NULL;
END $$;

CREATE FUNCTION tally_tasks_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
    SELECT queue, status, '-infinity', -count(*) FROM tally_old GROUP BY queue, status;
    RETURN NULL;
END $$;

-- An update that changes no status (a heartbeat, a reseal) appends nothing.
CREATE FUNCTION tally_tasks_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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

-- Attempt outcomes: an attempt is updated from 'executing' to its final status once;
-- any later update of a finished attempt (a reseal of its error) cancels out.
CREATE FUNCTION tally_attempts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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

CREATE TRIGGER tasks_tally_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS tally_new FOR EACH STATEMENT EXECUTE FUNCTION tally_tasks_inserted();
CREATE TRIGGER tasks_tally_update AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS tally_old NEW TABLE AS tally_new FOR EACH STATEMENT EXECUTE FUNCTION tally_tasks_updated();
CREATE TRIGGER tasks_tally_delete AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS tally_old FOR EACH STATEMENT EXECUTE FUNCTION tally_tasks_deleted();
CREATE TRIGGER attempts_tally_update AFTER UPDATE ON attempts
    REFERENCING OLD TABLE AS tally_old NEW TABLE AS tally_new FOR EACH STATEMENT EXECUTE FUNCTION tally_attempts_updated();

-- The figures of the rows that exist now (this migration holds its lock while it
-- counts them once).
INSERT INTO queue_tally (queue, metric, bucket, n)
SELECT queue, status, '-infinity', count(*) FROM tasks GROUP BY queue, status;
INSERT INTO queue_tally (queue, metric, bucket, n)
SELECT queue, 'attempt:' || status, date_bin('10 seconds', finished_at, 'epoch'), count(*)
FROM attempts WHERE status <> 'executing' AND finished_at > now() - interval '1 hour'
GROUP BY 1, 2, 3;

-- Dispatch by queue. The dispatcher's timed pass finds the queues whose waiting tasks
-- became due since its last pass (newlyDue), and plans the next (nextDue), through
-- this index of the tasks that were written to wait: scheduled ahead, or backing off
-- after a failure. A task due when it was written (an enqueue without a schedule, a
-- release) is not in it: its own wake-up (NOTIFY, the release) dispatches it. So a
-- backlog of due tasks, however large, costs the timed pass nothing, and no
-- statement that reads a queue's due tasks in priority order (dispatchDue, whose
-- WHERE clause does not imply this predicate) can be planned on it instead of
-- tasks_dispatch_idx.
CREATE INDEX tasks_due_at_idx ON tasks (scheduled_at) INCLUDE (queue)
    WHERE status IN ('pending', 'retry') AND scheduled_at > updated_at;
-- The periodic sweep probes each queue's earliest waiting task once (dueQueues: one
-- statement, never one per queue), and the oldest-age read finds a queue's oldest
-- due task. "priority > 0" is always true (priorities are 1..10): it is there so
-- that only statements that say it may use this index, and never the dispatch
-- statement, whose priority-ordered read must stay on tasks_dispatch_idx.
CREATE INDEX tasks_queue_due_idx ON tasks (queue, scheduled_at)
    WHERE status IN ('pending', 'retry') AND priority > 0;
-- The repair pass pages through every queue's buffered tasks in one statement.
CREATE INDEX tasks_buffered_idx ON tasks (dispatched_at, id) WHERE status = 'claimed';
-- Retention deletes expired finished tasks of every queue in one statement.
CREATE INDEX tasks_finished_idx ON tasks (finished_at) WHERE status IN ('done', 'cancelled');
-- The limits cache reloads only the queues changed since its last look.
CREATE INDEX queues_updated_idx ON queues (updated_at);
