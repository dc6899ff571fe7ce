-- name: list_history_partitions
-- list_history_partitions: every day partition of task history, by status and day,
-- with the planner's estimate of its rows (read from the catalog, never counted).
--
-- Parameters: none.
-- Returns: status, day, rows_estimate.
SELECT status, day, rows_estimate FROM taskforge_history_partitions ORDER BY status, day
