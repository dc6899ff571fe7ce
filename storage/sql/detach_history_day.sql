-- name: detach_history_day
-- detach_history_day detaches the day partitions of status $1 for UTC day $2 (see
-- migration 0021): 'detached', 'held' while workflow tasks remain in it, or 'gone'.
--
-- Parameters:
--   $1 text: the status
--   $2 date: the day
-- Returns: outcome.
SELECT taskforge_detach_history_day($1, $2) AS outcome
