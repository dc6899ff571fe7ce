-- name: ensure_history_partitions_since
-- ensure_history_partitions_since creates the day partitions of history for every
-- UTC day from the day of $1 to today, that do not exist yet, and returns how many
-- it created: the mover (package backfill) calls it before moving finished tasks of
-- those days, so that they land in their day and leave with it.
--
-- Parameters:
--   $1 timestamptz: the first day's time (the oldest finished task's finished_at)
--   $2 timestamptz: now: the Store's clock, or NULL for the database's
-- Returns: created.
SELECT taskforge_ensure_history_partitions(($1::timestamptz AT TIME ZONE 'UTC')::date,
	greatest(1, ((coalesce($2::timestamptz, now()) AT TIME ZONE 'UTC')::date
		- ($1::timestamptz AT TIME ZONE 'UTC')::date) + 1))::int8 AS created
