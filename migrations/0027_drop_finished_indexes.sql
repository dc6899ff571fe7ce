-- 0027: tasks loses the indexes that only its finished rows needed.
--
-- Since 0023 a task leaves tasks in the transaction that finishes it, so tasks holds
-- unfinished work only, yet it still carried three indexes for finished rows, and
-- every enqueue and claim paid for them (the planner and the executor open each index
-- of the table, and an insert or a non-HOT update evaluates each partial index's
-- predicate):
--
--   - tasks_dead_idx (queue, finished_at DESC, id DESC) WHERE status = 'dead': the
--     DLQ's list. The reads of dead tasks in tasks (list_dead, any_dead, lock_dead,
--     bulk_discard_dead) take tasks_status_list_idx (queue, status, ...) instead, an
--     empty range once no dead task is left there; history has its own.
--   - tasks_finished_idx (finished_at) WHERE status IN ('done', 'cancelled'):
--     retention's sweep of tasks (delete_expired_tasks reads (queue, status,
--     created_at), tasks_status_list_idx again).
--   - tasks_idempotency_idx UNIQUE (queue, idempotency_key): since 0018 the keys are
--     reserved in idempotency_keys, which alone decides a duplicate; no statement
--     reads tasks by key.
--
-- A database upgraded from a release before 0023 may still hold finished rows in
-- tasks until the mover (package backfill) has moved them; the indexes keep their
-- reads fast meanwhile. So this migration drops them only when tasks holds no
-- finished row (a new database, or one whose rows have all moved); otherwise the
-- mover drops them (DROP INDEX CONCURRENTLY, idempotent) once a run of it leaves
-- none. A finished row that a replica of the older release writes afterwards is read
-- without them (tasks_status_list_idx) until the mover's next run moves it.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tasks WHERE status IN ('done', 'cancelled', 'dead')) THEN
        DROP INDEX IF EXISTS tasks_dead_idx;
        DROP INDEX IF EXISTS tasks_finished_idx;
        DROP INDEX IF EXISTS tasks_idempotency_idx;
    END IF;
END $$;
