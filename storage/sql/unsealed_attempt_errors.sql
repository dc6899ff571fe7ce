-- name: unsealed_attempt_errors
-- unsealed_attempt_errors lists the attempts of tasks $1 whose error is not sealed with
-- the current key ($2 as in unsealed_tasks' $4), in attempts and attempt_history.
--
-- Parameters:
--   $1 uuid[]: the tasks
--   $2 text: the start of a text sealed with the current key
-- Returns: task_id, attempt, error.
WITH live AS (
	SELECT task_id, attempt, error FROM attempts
	WHERE task_id = ANY($1) AND coalesce(error, '') <> '' AND left(error, length($2)) <> $2
	FOR UPDATE
), old AS (
	SELECT task_id, attempt, error FROM attempt_history
	WHERE task_id = ANY($1) AND coalesce(error, '') <> '' AND left(error, length($2)) <> $2
	FOR UPDATE
)
SELECT task_id, attempt, error FROM live
UNION ALL
SELECT task_id, attempt, error FROM old
