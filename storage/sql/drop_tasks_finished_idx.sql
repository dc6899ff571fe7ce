-- name: drop_tasks_finished_idx
-- drop_tasks_finished_idx drops tasks_finished_idx, an index of tasks that only finished rows
-- needed (migration 0027 says why), without blocking the queue's writes: CONCURRENTLY,
-- so outside any transaction. IF EXISTS: a no-op once it is gone, and it also drops
-- the index that an interrupted drop left invalid. The mover (package backfill) runs
-- it once tasks holds no finished row.
--
-- Parameters: none.
-- Returns: no rows.
DROP INDEX CONCURRENTLY IF EXISTS tasks_finished_idx
