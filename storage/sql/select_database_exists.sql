-- name: select_database_exists
-- select_database_exists reports whether database $1 exists (on any database of the
-- server; `taskforge dev` asks the embedded server's maintenance database).
--
-- Parameters:
--   $1 name: the datname
-- Returns: exists.
SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)
