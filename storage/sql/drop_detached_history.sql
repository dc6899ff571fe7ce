-- name: drop_detached_history
-- drop_detached_history drops every detached day of history, counted out of the
-- tally, with its idempotency keys' reservations (see migration 0021).
--
-- Parameters: none.
-- Returns: status, day, tasks.
SELECT dropped_status AS status, dropped_day AS day, dropped_tasks AS tasks FROM taskforge_drop_detached_history()
