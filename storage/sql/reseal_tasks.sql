-- name: reseal_tasks
-- reseal_tasks stores re-sealed payloads, results, last errors and progress, in tasks
-- or in task_history, wherever each row is.
--
-- Parameters:
--   $1 uuid[]: the id of each row
--   $2 text[]: the payload of each row
--   $3 text[]: the result of each row
--   $4 text[]: the last_error of each row
--   $5 text[]: the progress of each row
-- Returns: changed (rows updated).
WITH u AS (
	SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(id, payload, result, last_error, progress)
), live AS (
	UPDATE tasks t SET payload = u.payload::jsonb, result = u.result::jsonb, last_error = u.last_error,
		progress = u.progress::jsonb
	FROM u WHERE t.id = u.id
	RETURNING 1
), old AS (
	UPDATE task_history t SET payload = u.payload::jsonb, result = u.result::jsonb, last_error = u.last_error,
		progress = u.progress::jsonb
	FROM u WHERE t.id = u.id
	RETURNING 1
)
SELECT (SELECT count(*) FROM live) + (SELECT count(*) FROM old) AS changed
