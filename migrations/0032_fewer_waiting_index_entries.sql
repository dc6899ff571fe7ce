-- 0032: a waiting task of the unnamed group writes three index entries, not five
-- (issues 35 and 38).
--
-- A pending or retry row was in five indexes: tasks_pkey, tasks_status_list_idx,
-- tasks_dispatch_idx (queue, priority, scheduled_at), tasks_group_dispatch_idx
-- (queue, priority, group_key, scheduled_at) and tasks_queue_due_idx (queue,
-- scheduled_at), the last three all of waiting rows. Every enqueue paid for each
-- entry (a batch of 1,000 spent 10 ms in PostgreSQL's insert), and so did the
-- dispatch's non-HOT update, whose old version leaves them to vacuum.
--
-- tasks_group_dispatch_idx alone already orders the unnamed group (group_key NULL,
-- every task of a queue without groups) as tasks_dispatch_idx did: within a
-- (queue, priority) its NULLs are one range in scheduled_at order. So the readers
-- that needed tasks_dispatch_idx's order read the unnamed group's head there
-- (group_key IS NULL, ORDER BY group_key, scheduled_at), and the named groups' head
-- in one index of their own, tasks_named_dispatch_idx, (queue, priority,
-- scheduled_at) of the named groups' waiting rows: a queue without fairness keeps
-- one line by priority across its groups by merging the two heads of each level
-- (dispatch_due). The readers of tasks_queue_due_idx (due_queues, oldest_waiting,
-- bulk_prune_heads) probe the same two heads per priority level, 1..10, instead of
-- one (queue, scheduled_at) range. A waiting task of the unnamed group: tasks_pkey,
-- tasks_group_dispatch_idx, tasks_status_list_idx; of a named group, one more
-- (tasks_named_dispatch_idx).
--
-- On a live table: tasks_named_dispatch_idx is built inside the migration's
-- transaction (the runner allows no CONCURRENTLY), which reads the whole heap and
-- holds back the writes to tasks meanwhile (0.9 s for 1.55 million rows, 410,000 of
-- them named groups' waiting tasks), but writes entries for named groups' waiting
-- rows only, none without fair queues. The previous release's dispatch and sweep are
-- planned on the two old indexes, and without them sort a priority level's waiting
-- tasks every pass (4 s a pass at a million). So, as 0027 does, the migration drops
-- them only where that sort is short: when tasks holds at most 10,000 waiting rows.
-- Otherwise they stay (the new statements do not read them) until the operator drops
-- them, CONCURRENTLY, once no replica of the previous release runs (docs/operations.md,
-- Upgrades).
CREATE INDEX tasks_named_dispatch_idx ON tasks (queue, priority, scheduled_at)
    WHERE status IN ('pending', 'retry') AND group_key IS NOT NULL;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tasks WHERE status IN ('pending', 'retry') OFFSET 10000) THEN
        DROP INDEX IF EXISTS tasks_queue_due_idx;
        DROP INDEX IF EXISTS tasks_dispatch_idx;
    END IF;
END $$;
