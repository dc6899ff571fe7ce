-- name: enqueue_debounced
-- enqueue_debounced is the whole write of an enqueue with a debounce key, one statement
-- (a commit with it, outside a transaction). The queue's task holding the key (the one
-- row of tasks_debounce_idx for (queue, key), debounce_open) is replaced while it is
-- replaceable: pending, never attempted, and not yet due at $12. Otherwise a new task
-- is inserted, due at $12 + $9 ms. In order:
--
--   - q reads the queue's default budget and holds KEY SHARE, as enqueue_tasks does: no
--     queue, no row, nothing written.
--   - up inserts the new task holding the key. When the key is held, ON CONFLICT
--     locks the holder and reads its latest committed version, whatever this
--     statement's snapshot saw, so that of any number of racing enqueues on any
--     replicas one inserts and each of the others replaces the task it inserted,
--     one after another (each waits for the one before to commit). The holder then
--     either takes the request (payload, priority, group, budget, timeout and trace context;
--     scheduled_at = $12 + $9 ms but never past its first enqueue (created_at) + $10
--     ms; debounced + 1), or, when it is no longer replaceable, only gives up the key
--     (debounce_open = false) and is returned as 'released': the caller runs the
--     statement again, which then inserts (or replaces a holder a racing enqueue
--     inserted meanwhile). Why not an advisory lock on (queue, key) first: taken
--     inside this statement it comes after the snapshot, which then misses the task
--     its previous holder inserted; taken in a statement of its own it costs a round
--     trip or a transaction on every enqueue.
--   - outcome says what up did: 'created', 'replaced' or 'released'.
--   - tallied appends the count delta of an inserted task on a hot-path connection,
--     grouped its group's (migration 0028). A replacement that moves the task to
--     another group is counted by the row trigger, on any connection: up's RETURNING
--     cannot show the old group.
--   - wake notifies the dispatchers ($2 names the channel) unless only a key was
--     released: the task's due time is new either way; the final WHERE makes
--     PostgreSQL evaluate it, once.
--
-- Parameters:
--   $1 text: the queue
--   $2 text: the NOTIFY channel of due work (storage.DueChannel)
--   $3 uuid: the id of a new task
--   $4 text: the payload
--   $5 int: the priority
--   $6 int: the max_retries (NULL: the queue's)
--   $7 int: the timeout_seconds (NULL: none)
--   $8 text: the debounce key
--   $9 int8: debounce_ms, the quiet period
--   $10 int8: debounce_max_ms, the longest a task waits from its first enqueue (NULL: no cap)
--   $11 text: the trace context (traceparent) of the request
--   $12 timestamptz: now (the Store's clock; NULL: the database's now())
--   $13 text: the group_key (NULL: the unnamed group)
-- Returns: every column of the task row (as get_task), then outcome.
WITH q AS MATERIALIZED (
	SELECT max_retries, coalesce($12::timestamptz, now()) AS now
	FROM queues WHERE name = $1 FOR KEY SHARE
), up AS (
	INSERT INTO tasks AS t (id, queue, payload, priority, status, scheduled_at, max_retries,
		timeout_seconds, traceparent, created_at, updated_at, debounce_key, debounce_open, group_key)
	SELECT $3, $1, $4::jsonb, $5, 'pending', q.now + $9::int8 * interval '1 millisecond',
		coalesce($6::int, q.max_retries), $7::int, $11, q.now, q.now, $8, true, $13::text
	FROM q
	ON CONFLICT (queue, debounce_key) WHERE debounce_open DO UPDATE SET
		(payload, priority, scheduled_at, max_retries, timeout_seconds, traceparent, updated_at,
			debounced, debounce_open, group_key) = (
		SELECT
			CASE WHEN r THEN excluded.payload ELSE t.payload END,
			CASE WHEN r THEN excluded.priority ELSE t.priority END,
			CASE WHEN r THEN least(excluded.scheduled_at, t.created_at + $10::int8 * interval '1 millisecond')
				ELSE t.scheduled_at END,
			CASE WHEN r THEN excluded.max_retries ELSE t.max_retries END,
			CASE WHEN r THEN excluded.timeout_seconds ELSE t.timeout_seconds END,
			CASE WHEN r THEN excluded.traceparent ELSE t.traceparent END,
			CASE WHEN r THEN excluded.updated_at ELSE t.updated_at END,
			t.debounced + r::int,
			r,
			CASE WHEN r THEN excluded.group_key ELSE t.group_key END
		FROM (SELECT t.status = 'pending' AND t.attempts = 0 AND t.scheduled_at > excluded.created_at) AS holder(r)
	)
	RETURNING id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step, debounce_key, debounced, group_key,
	CASE WHEN id = $3 THEN 'created' WHEN debounce_open THEN 'replaced' ELSE 'released' END AS outcome
), tallied AS (
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT $1, 'pending', '-infinity', 1 FROM up WHERE outcome = 'created' AND tally_written_inline()
), grouped AS (
	INSERT INTO group_tally_delta (queue, group_key, status, delta)
	SELECT $1, group_key, 'pending', 1 FROM up
	WHERE outcome = 'created' AND group_key IS NOT NULL AND group_tally_written_inline()
), wake AS (
	SELECT pg_notify($2, $1) FROM up WHERE outcome <> 'released'
)
SELECT * FROM up WHERE (SELECT count(*) FROM wake) >= 0
