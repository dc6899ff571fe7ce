-- name: claim_tasks
-- claim_tasks turns buffered ids that are still 'claimed' into executing tasks, each
-- for the worker given with it ($1 ids, $2 worker ids), with a fresh lease of $3 ms
-- from $4 (NULL: now()), in one statement. The new attempt is the task row's (attempts,
-- claimed_by, lease_token, attempt_started_at): no attempt row is written until the
-- attempt ends (migration 0033; all_attempts reads it from the task). Ids no longer
-- claimable (cancelled, already taken by another replica) are skipped; an id given
-- twice is claimed once, for the worker given with it first. The ids are taken with
-- id = ANY($1), each row's worker found by its id's position, not through a join
-- (one probe of tasks_pkey per id whatever the statistics: statements.go). A task outside a workflow gets a plain lease token (a
-- version 8 UUID, see statements.go). On a hot-path connection it appends its count deltas
-- (tally_written_inline()) and its named groups' (group_tally_written_inline(), one
-- row per group and status, migration 0028).
--
-- Parameters:
--   $1 uuid[]: the id of each row
--   $2 text[]: the worker of each row
--   $3 float8: the lease to grant, in milliseconds
--   $4 timestamptz: the time (NULL: now())
-- Returns: every column of the task row (as get_task).
WITH claimed AS (
	UPDATE tasks t SET
		status = 'executing',
		attempts = t.attempts + 1,
		claimed_by = ($2::text[])[array_position($1::uuid[], t.id)],
		lease_token = CASE WHEN t.workflow_id IS NULL THEN overlay(gen_random_uuid()::text PLACING '8' FROM 15)::uuid ELSE gen_random_uuid() END,
		heartbeat_at = coalesce($4::timestamptz, now()),
		attempt_started_at = coalesce($4::timestamptz, now()),
		lease_expires_at = least(coalesce($4::timestamptz, now()) + $3 * interval '1 millisecond',
			coalesce($4::timestamptz, now()) + t.timeout_seconds * interval '1 second'),
		deadline_at = coalesce($4::timestamptz, now()) + t.timeout_seconds * interval '1 second',
		cancel_requested = false,
		progress = NULL, -- a new attempt starts with no progress reported
		updated_at = coalesce($4::timestamptz, now())
	WHERE t.id = ANY($1::uuid[]) AND t.status || '' = 'claimed' -- by primary key, no join (statements.go)
	RETURNING t.id, t.queue, t.payload, t.priority, t.status, t.scheduled_at, t.attempts,
	t.max_retries, t.timeout_seconds, t.idempotency_key, t.fingerprint, t.last_error, t.result,
	t.claimed_by, t.lease_token, t.heartbeat_at, t.lease_expires_at, t.cancel_requested,
	t.replayed_from, t.replay_count, t.replayed_at, t.attempt_started_at, t.traceparent, t.releases,
	t.progress, t.created_at, t.updated_at, t.finished_at, t.schedule, t.workflow_id, t.step, t.debounce_key, t.debounced, t.group_key
), tallied AS (
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT c.queue, m.metric, '-infinity', m.sign * count(*)
	FROM claimed c CROSS JOIN (VALUES ('claimed', -1), ('executing', 1)) AS m(metric, sign)
	WHERE tally_written_inline()
	GROUP BY c.queue, m.metric, m.sign
), grouped AS (
	INSERT INTO group_tally_delta (queue, group_key, status, delta)
	SELECT c.queue, c.group_key, m.status, m.sign * count(*)
	FROM claimed c CROSS JOIN (VALUES ('claimed', -1), ('executing', 1)) AS m(status, sign)
	WHERE c.group_key IS NOT NULL AND group_tally_written_inline()
	GROUP BY c.queue, c.group_key, m.status, m.sign
)
SELECT id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key FROM claimed
