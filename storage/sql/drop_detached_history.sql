-- name: drop_detached_history
-- drop_detached_history drops every detached day of history, counted out of the
-- tally; its tasks' idempotency keys go too, or, within their queue's idempotency
-- window, stay reserved until it ends (see migrations 0021 and 0024).
--
-- Parameters: none.
-- Returns: status, day, tasks.
SELECT dropped_status AS status, dropped_day AS day, dropped_tasks AS tasks FROM taskforge_drop_detached_history()
