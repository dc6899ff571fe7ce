-- name: ack_plain_task_refs
-- ack_plain_task_refs is ack_plain_tasks returning the ack ref columns only, for acks
-- whose answer carries no task (a poll's, or a batch's with the minimal answer).
--
-- Kept beside ack_plain_tasks for one figure: serve's CPU for E1 with 16 batched
-- workers, 1.03 and 0.88 s returning whole tasks, 0.81 and 0.79 s with this statement
-- (commit 0b1fa77).
--
-- Parameters:
--   $1 uuid[]: the id of each row
--   $2 uuid[]: the token of each row
--   $3 text[]: the worker of each row
--   $4 text[]: the result of each row
--   $5 timestamptz: the time (NULL: now())
-- Returns: id, queue, status, attempts, lease_token, attempt_started_at, traceparent,
--   updated_at, finished_at, group_key.
WITH input AS (
	SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) AS i(id, token, worker, result)
), acked AS (
	UPDATE tasks t SET status = 'done', result = i.result::jsonb,
		finished_at = coalesce($5::timestamptz, now()), updated_at = coalesce($5::timestamptz, now()),
		lease_expires_at = NULL, deadline_at = NULL
	FROM input i
	WHERE t.id = i.id AND t.lease_token = i.token AND t.claimed_by = i.worker
		AND t.status || '' = 'executing' -- by primary key (statements.go)
		AND t.lease_expires_at > coalesce($5::timestamptz, now())
		AND t.workflow_id IS NULL
	RETURNING t.id, t.queue, t.status, t.attempts, t.lease_token, t.attempt_started_at, t.traceparent, t.updated_at, t.finished_at,
		t.group_key
), recorded AS (
	UPDATE attempts a SET status = 'succeeded', finished_at = coalesce($5::timestamptz, now())
	FROM acked WHERE a.task_id = acked.id AND a.attempt = acked.attempts
	RETURNING a.queue, a.finished_at
), tallied AS (
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT queue, metric, bucket, sum(n) FROM (
		SELECT queue, 'executing' AS metric, '-infinity'::timestamptz AS bucket, -1 AS n FROM acked
		UNION ALL
		SELECT queue, 'done', '-infinity', 1 FROM acked
		UNION ALL
		SELECT queue, 'attempt:succeeded', date_bin('10 seconds', finished_at, 'epoch'), 1 FROM recorded
	) d
	WHERE tally_written_inline()
	GROUP BY queue, metric, bucket
)
SELECT id, queue, status, attempts, lease_token, attempt_started_at, traceparent, updated_at, finished_at, group_key FROM acked
