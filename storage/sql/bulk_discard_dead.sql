-- name: bulk_discard_dead
-- bulk_discard_dead deletes up to $4 dead tasks of queue $1: those among $2, or any
-- when $3, live ones (tasks) first, then ones in history (task_history). Their
-- attempts go with them (from attempts and attempt_history here: no foreign key
-- cascades since migration 0033),
-- their idempotency keys with them, or, within their queue's idempotency window,
-- reserved until it ends (0022).
--
-- Parameters:
--   $1 text: the queue
--   $2 uuid[]: the id
--   $3 bool: true: any dead task of the queue, not only those of $2
--   $4 int8: the most rows to take
-- Returns: id (of each task deleted).
WITH live_doomed AS (
	SELECT id FROM tasks
	WHERE queue = $1 AND status = 'dead' AND ($3 OR id = ANY($2::uuid[]))
	LIMIT $4
	FOR UPDATE SKIP LOCKED
), old_doomed AS (
	SELECT id FROM task_history
	WHERE queue = $1 AND status = 'dead' AND ($3 OR id = ANY($2::uuid[]))
	LIMIT greatest($4 - (SELECT count(*) FROM live_doomed), 0)
	FOR UPDATE SKIP LOCKED
), live AS (
	DELETE FROM tasks t USING live_doomed WHERE t.id = live_doomed.id
	RETURNING t.id, t.idempotency_key
), live_attempts AS (
	DELETE FROM attempts a USING live WHERE a.task_id = live.id
), old AS (
	DELETE FROM task_history t
	WHERE t.status = 'dead' AND t.id = ANY (ARRAY(SELECT id FROM old_doomed))
	RETURNING t.id, t.idempotency_key, t.finished_at
), old_attempts AS (
	DELETE FROM attempt_history a USING old
	WHERE a.task_status = 'dead' AND a.task_id = old.id AND a.task_finished_at = old.finished_at
), gone AS (
	SELECT id, idempotency_key FROM live
	UNION ALL
	SELECT id, idempotency_key FROM old
), keys AS (
	SELECT taskforge_release_idempotency_keys(array_agg($1::text), array_agg(idempotency_key), array_agg(id)) AS kept
	FROM gone
)
SELECT id FROM gone WHERE (SELECT count(*) FROM keys) >= 0
