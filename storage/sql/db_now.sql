-- name: db_now
-- db_now is the database clock.
--
-- Parameters: none.
-- Returns: now.
SELECT now()
