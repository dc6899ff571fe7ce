-- 0033: the claim writes no attempt row, and attempts loses its foreign key (issues
-- 35 and 38).
--
-- The attempt an executing task is in is described by the task row itself: attempts
-- (its number), claimed_by, lease_token, attempt_started_at and queue. The claim no
-- longer inserts an 'executing' row into attempts; each statement that ends an
-- attempt (ack, nack, release, reclaim) writes the ended attempt from the task row,
-- and counts its outcome ('attempt:<status>') in the same statement. attempts keeps
-- the ended attempts of tasks still live (a failed attempt of a task that will retry);
-- attempt_history those of finished tasks, as before. Measured on the plain path, one
-- backend, statements alone, against the claim and ack that wrote and finished the
-- row: 0.91x the PostgreSQL time at one task a statement, 0.86x at 16
-- (docs/design-notes.md).
--
-- The foreign key attempts.task_id -> tasks (ON DELETE CASCADE) goes too: its check
-- on each insert and its cascade on each delete of tasks are row triggers, which the
-- plain ack (a delete of tasks) paid per task. Every statement that deletes tasks now
-- deletes their attempts itself (the moves into history already did), and a queue's
-- deletion (queues_delete_tasks, migration 0015) deletes its tasks' attempts with them.
--
-- Rolling upgrade: a replica of the previous release still inserts an 'executing'
-- row at its claims and updates it when the attempt ends. The statements of this
-- release end such a row in place (updated, and counted by attempts_tally_update as
-- before off the hot path, inline on it), and insert a row only when there is none,
-- so no (task_id, attempt) is written twice and no outcome counted twice. An attempt
-- a replica of this release began and one of the previous release ends is not
-- recorded (it finds no row to update); docs/operations.md says so.
ALTER TABLE attempts DROP CONSTRAINT attempts_task_id_fkey;

-- all_attempts: a task's attempts wherever they are, the current attempt of an
-- executing task read from the task row unless a row of the previous release
-- describes it. Its finished_at is NULL, so readers of finished attempts (a filter
-- on finished_at) never read tasks.
CREATE OR REPLACE VIEW all_attempts AS
    SELECT task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at, error
    FROM attempts
    UNION ALL
    SELECT t.id, t.attempts, t.queue, t.claimed_by, t.lease_token, 'executing'::text,
        -- attempts claimed before migration 0003 have no start on the task row
        coalesce(t.attempt_started_at, t.heartbeat_at, t.updated_at), NULL::timestamptz, NULL::text
    FROM tasks t
    WHERE t.status = 'executing'
        AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = t.id AND a.attempt = t.attempts)
    UNION ALL
    SELECT task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at, error
    FROM attempt_history;

-- A queue's deletion deletes its tasks (0015) and, now that no cascade does, their
-- attempts.
CREATE OR REPLACE FUNCTION queues_delete_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH gone AS (
        DELETE FROM tasks WHERE queue = OLD.name RETURNING id
    )
    DELETE FROM attempts a USING gone WHERE a.task_id = gone.id;
    RETURN NULL;
END $$;
