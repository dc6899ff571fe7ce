-- name: reseal_attempt_errors
-- reseal_attempt_errors stores re-sealed attempt errors, in attempts or in
-- attempt_history, wherever each row is.
--
-- Parameters:
--   $1 uuid[]: the task_id of each row
--   $2 int[]: the attempt of each row
--   $3 text[]: the error of each row
-- Returns: no rows.
WITH u AS (
	SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[]) AS u(task_id, attempt, error)
), live AS (
	UPDATE attempts a SET error = u.error
	FROM u WHERE a.task_id = u.task_id AND a.attempt = u.attempt
)
UPDATE attempt_history a SET error = u.error
FROM u WHERE a.task_id = u.task_id AND a.attempt = u.attempt
