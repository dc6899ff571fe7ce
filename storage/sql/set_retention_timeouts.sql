-- name: set_retention_timeouts
-- set_retention_timeouts bounds the rest of a retention transaction: $1 is in ms.
--
-- Parameters:
--   $1 text: the statement and lock timeout, in milliseconds (text, as set_config takes it)
-- Returns: set_config, set_config.
SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true)
