-- name: drop_detached_history
-- drop_detached_history drops every detached day of history, counted out of the
-- tally; its tasks' idempotency keys stay as they are, reserved by their rows until
-- their queue's idempotency window ends, and are listed in idempotency_key_drops for
-- the janitor to delete then (see migrations 0021 and 0034).
--
-- Parameters: none.
-- Returns: status, day, tasks.
SELECT dropped_status AS status, dropped_day AS day, dropped_tasks AS tasks FROM taskforge_drop_detached_history()
