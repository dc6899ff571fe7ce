-- name: move_finished_batch
-- move_finished_batch moves into history the finished tasks (done, cancelled, dead)
-- in $2 blocks of tasks' heap from block $1, with their attempts, as the statements
-- that finish a task do: task_history takes the row as it is (same columns, same
-- order), attempt_history each attempt with its task's status and finished_at. It is
-- the batch of the mover of databases upgraded from a release without history
-- (package backfill). It reads the heap in order (a TID range scan), so a batch
-- costs its own blocks whatever the ids' order and whatever the mover has left
-- behind, and it locks only the finished rows it moves; SKIP LOCKED leaves one that
-- another transaction holds (a replay, a discard) to a later pass, as it leaves a
-- row that an update moved behind the pass. The tally triggers count each row out
-- of tasks and into history, which leaves every count as it was.
--
-- Parameters:
--   $1 int8: the first block of tasks the batch reads
--   $2 int8: how many blocks it reads
-- Returns: moved, attempts, blocks (the attempts moved with the tasks; tasks' size in
--   blocks now, where a pass ends).
WITH pick AS (
	SELECT coalesce(array_agg(id), '{}') AS ids FROM (
		SELECT t.id FROM tasks t
		WHERE t.ctid >= format('(%s,0)', $1::int8)::tid AND t.ctid < format('(%s,0)', $1::int8 + $2::int8)::tid
			AND t.status IN ('done', 'cancelled', 'dead')
		FOR UPDATE OF t SKIP LOCKED
	) locked
), moved AS (
	DELETE FROM tasks t WHERE t.id = ANY ((SELECT ids FROM pick)::uuid[]) RETURNING t.*
), history AS (
	INSERT INTO task_history SELECT * FROM moved RETURNING 1
), gone AS (
	DELETE FROM attempts a WHERE a.task_id = ANY ((SELECT ids FROM pick)::uuid[]) RETURNING a.*
), attempt_rows AS (
	INSERT INTO attempt_history
	SELECT g.*, m.status, m.finished_at FROM gone g JOIN moved m ON m.id = g.task_id
	RETURNING 1
)
SELECT (SELECT count(*) FROM history) AS moved, (SELECT count(*) FROM attempt_rows) AS attempts,
	pg_relation_size('tasks') / current_setting('block_size')::int8 AS blocks
