-- name: create_database_statement
-- create_database_statement writes the CREATE DATABASE statement for a database
-- name, quoted as an identifier by PostgreSQL itself (format's %I): CREATE DATABASE
-- takes no parameters, so CreateDatabase runs the text this returns.
--
-- Parameters:
--   $1 text: the database's name
-- Returns: format.
SELECT format('CREATE DATABASE %I', $1::text)
