-- name: finished_indexes_left
-- finished_indexes_left names the indexes of tasks that only finished rows need
-- (migration 0027) that still exist, valid or not: the mover drops them once tasks
-- holds no finished row (drop_tasks_dead_idx and its two twins). One row per index
-- left; catalog reads only.
--
-- Parameters: none.
-- Returns: name.
SELECT name FROM unnest(ARRAY['tasks_dead_idx', 'tasks_finished_idx', 'tasks_idempotency_idx']) AS i(name)
WHERE to_regclass(name) IS NOT NULL
ORDER BY name
