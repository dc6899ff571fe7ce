-- name: listen_due
-- listen_due subscribes a session to the enqueues' announcements of due work.
--
-- Parameters: none.
-- Returns: no rows.
LISTEN taskforge_due
