-- name: list_group_tasks
-- list_group_tasks is list_tasks for the tasks of one group ($9): a statement of its
-- own, so that list_tasks' generic plan keeps its estimate (one more optional filter
-- there turned it into a sequential scan). A group's tasks have no index of their
-- own: they are found among the queue's by status and age.
--
-- list_tasks: newest first, keyset-paginated on (created_at, id), among the tasks whose
-- status is one of $2 (every status, for an unfiltered list). Other null filters match
-- all. Each status is one probe of tasks_status_list_idx in its own order, stopped by
-- LIMIT; the probes' pages are merged. (No index orders a queue's tasks by age alone:
-- see migration 0014.)
--
-- Parameters:
--   $1 text: the queue
--   $2 text[]: the statuses wanted
--   $3 text: the worker (NULL: any)
--   $4 timestamptz: created at or after (NULL: any time)
--   $5 timestamptz: created before (NULL: any time)
--   $6 timestamptz: keyset position: the created_at after which to continue (NULL: from the start)
--   $7 uuid: keyset position: the id after which to continue
--   $8 int8: the most rows to take
--   $9 text: the group_key
-- Returns: every column of the task row (as get_task).
SELECT id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key FROM unnest($2::text[]) AS s(wanted)
CROSS JOIN LATERAL (
	SELECT id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key FROM all_tasks
	WHERE queue = $1 AND status = s.wanted
		AND ($3::text IS NULL OR claimed_by = $3)
		AND ($4::timestamptz IS NULL OR created_at >= $4)
		AND ($5::timestamptz IS NULL OR created_at < $5)
		AND ($6::timestamptz IS NULL OR (created_at, id) < ($6, $7::uuid))
		AND group_key = $9::text
	ORDER BY created_at DESC, id DESC
	LIMIT $8
) t
ORDER BY created_at DESC, id DESC
LIMIT $8
