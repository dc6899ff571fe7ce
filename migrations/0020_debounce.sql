-- 0020: debounce (enqueue_debounced).
--
-- A task enqueued with a debounce key carries it for good (debounce_key, shown on the
-- task), counts the enqueues that replaced it (debounced), and, while it may still be
-- replaced, holds its key (debounce_open). tasks_debounce_idx makes the holder of a
-- key unique per queue, so that enqueue_debounced's INSERT … ON CONFLICT decides
-- between "insert a new task" and "replace the holder" atomically, on the holder's
-- latest row version, however many replicas race on one key.
--
-- Only enqueue_debounced changes debounce_open: it sets it on the task it inserts and
-- clears it on a holder it finds no longer replaceable (dispatched, running, finished,
-- or due). No other statement writes it, so no other statement can meet the unique
-- index. A statement that moves a finished row back from task_history into tasks
-- must set debounce_open to false.
--
-- The new columns have constant defaults (no table rewrite). The index is partial on
-- a column that is false in every existing row: building it reads tasks once under a
-- SHARE lock, which holds enqueues back for that read (tasks holds unfinished work
-- only once 0018's mover has run); nothing else waits.
--
-- task_history keeps the columns of tasks, in the same order (0018), so both tables
-- gain them, and all_tasks is re-created to show them (a view's * is expanded when
-- it is created).
ALTER TABLE tasks
    ADD COLUMN debounce_key  text,
    ADD COLUMN debounced     integer NOT NULL DEFAULT 0,
    ADD COLUMN debounce_open boolean NOT NULL DEFAULT false;
ALTER TABLE task_history
    ADD COLUMN debounce_key  text,
    ADD COLUMN debounced     integer NOT NULL DEFAULT 0,
    ADD COLUMN debounce_open boolean NOT NULL DEFAULT false;

CREATE OR REPLACE VIEW all_tasks AS
    SELECT * FROM tasks
    UNION ALL
    SELECT * FROM task_history;

-- enqueue_debounced: the one task of a queue that holds a debounce key.
CREATE UNIQUE INDEX tasks_debounce_idx ON tasks (queue, debounce_key) WHERE debounce_open;
