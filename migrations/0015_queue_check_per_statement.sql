-- 0015: a task's queue is checked once per statement, not once per row.
--
-- tasks.queue referenced queues (name) through a foreign key, whose check runs a
-- lookup of queues for every inserted row: a third of PostgreSQL's time for a
-- 1,000-task batch enqueue (COPY of 1,000 rows: 18.3–23.5 ms with it, 13.9–14.8 ms
-- without), though every row of such a batch names the same queue. The foreign key
-- is replaced by triggers that keep each of its guarantees, checked per statement:
--
--   - An insert names only queues that exist: once the statement's rows are in,
--     tasks_check_queues locks each distinct queue they name FOR KEY SHARE, as the
--     foreign key's check did, so a concurrent delete of that queue waits for this
--     transaction to end; a queue that does not exist (or was deleted by a
--     transaction that committed first) fails the statement with
--     foreign_key_violation, the error the foreign key raised, naming the same
--     constraint, so that callers tell a missing queue apart as before.
--   - No update moves a task to a queue that does not exist (no statement does; the
--     row trigger fires only for one that sets queue to a new value).
--   - Deleting a queue deletes its tasks (and through attempts' own foreign key,
--     their attempts), as ON DELETE CASCADE did; renaming a queue that holds tasks
--     fails, as the foreign key's NO ACTION did.
--
-- The transition table is the one tasks_tally_insert already captures: PostgreSQL
-- keeps one per table and event for all the statement's triggers, so the check adds
-- no per-row work. A replica of the previous release works unchanged against this
-- schema: it sees the same error for a missing queue, and the same cascade.
ALTER TABLE tasks DROP CONSTRAINT tasks_queue_fkey;

-- hold_task_queue holds queue named against deletion until the transaction ends
-- (KEY SHARE, the foreign key's lock), or fails as the foreign key did when there is
-- no such queue.
CREATE FUNCTION hold_task_queue(named text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM queues WHERE name = named FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insert or update on table "tasks" violates foreign key constraint "tasks_queue_fkey"'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'tasks_queue_fkey', TABLE = 'tasks',
                  SCHEMA = current_schema(), COLUMN = 'queue',
                  DETAIL = format('Key (queue)=(%s) is not present in table "queues".', named);
    END IF;
END $$;

CREATE FUNCTION tasks_check_queues() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM hold_task_queue(n.queue) FROM (SELECT DISTINCT queue FROM tasks_new ORDER BY queue) n;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_check_queues AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS tasks_new
    FOR EACH STATEMENT EXECUTE FUNCTION tasks_check_queues();

CREATE FUNCTION tasks_check_moved_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM hold_task_queue(NEW.queue);
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_check_moved_queue AFTER UPDATE OF queue ON tasks
    FOR EACH ROW WHEN (OLD.queue IS DISTINCT FROM NEW.queue)
    EXECUTE FUNCTION tasks_check_moved_queue();

CREATE FUNCTION queues_delete_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM tasks WHERE queue = OLD.name;
    RETURN NULL;
END $$;

CREATE TRIGGER queues_delete_tasks AFTER DELETE ON queues
    FOR EACH ROW EXECUTE FUNCTION queues_delete_tasks();

CREATE FUNCTION queues_check_renamed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM tasks WHERE queue = OLD.name) THEN
        RAISE EXCEPTION 'update or delete on table "queues" violates foreign key constraint "tasks_queue_fkey" on table "tasks"'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'tasks_queue_fkey', TABLE = 'queues',
                  SCHEMA = current_schema(),
                  DETAIL = format('Key (name)=(%s) is still referenced from table "tasks".', OLD.name);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER queues_check_renamed AFTER UPDATE OF name ON queues
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name)
    EXECUTE FUNCTION queues_check_renamed();
