-- name: unsealed_tasks
-- unsealed_tasks lists, in id order after $2, up to $3 tasks whose payload, result,
-- progress, last error or any attempt's error is not sealed with the current key ($1 is
-- the sealed prefix "v1.<key id>.", $4 the start of a sealed text with that key), live
-- (tasks, attempts) or finished (task_history, attempt_history): each side is read in id
-- order and locked, and the first $3 of both are returned (a row locked beyond them is
-- left for the next batch, which starts after the last returned).
--
-- Parameters:
--   $1 text: the sealed prefix of the current key ("v1.<key id>.")
--   $2 uuid: the id after which to continue
--   $3 int8: the most tasks to take
--   $4 text: the start of a text sealed with the current key
-- Returns: id, queue, payload, result, progress, last_error.
WITH live AS (
	SELECT id, queue, payload, result, progress, last_error FROM tasks t
	WHERE id > $2 AND (
		left(coalesce(payload->>'taskforge_sealed', ''), length($1)) <> $1
		OR (result IS NOT NULL AND left(coalesce(result->>'taskforge_sealed', ''), length($1)) <> $1)
		OR (progress IS NOT NULL AND left(coalesce(progress->>'taskforge_sealed', ''), length($1)) <> $1)
		OR (coalesce(last_error, '') <> '' AND left(last_error, length($4)) <> $4)
		OR EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = t.id
			AND coalesce(a.error, '') <> '' AND left(a.error, length($4)) <> $4))
	ORDER BY id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), old AS (
	SELECT id, queue, payload, result, progress, last_error FROM task_history t
	WHERE id > $2 AND (
		left(coalesce(payload->>'taskforge_sealed', ''), length($1)) <> $1
		OR (result IS NOT NULL AND left(coalesce(result->>'taskforge_sealed', ''), length($1)) <> $1)
		OR (progress IS NOT NULL AND left(coalesce(progress->>'taskforge_sealed', ''), length($1)) <> $1)
		OR (coalesce(last_error, '') <> '' AND left(last_error, length($4)) <> $4)
		OR EXISTS (SELECT 1 FROM attempt_history a WHERE a.task_id = t.id
			AND coalesce(a.error, '') <> '' AND left(a.error, length($4)) <> $4))
	ORDER BY id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
)
SELECT id, queue, payload, result, progress, last_error
FROM (SELECT * FROM live UNION ALL SELECT * FROM old) u
ORDER BY id
LIMIT $3
