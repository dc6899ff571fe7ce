-- name: notify_due
-- notify_due wakes dispatchers (LISTEN taskforge_due) for a queue with due work.
--
-- Parameters:
--   $1 text: the channel (storage.DueChannel)
--   $2 text: the queue with due work
-- Returns: pg_notify.
SELECT pg_notify($1, $2)
