package storage

// This file holds every SQL statement TaskForge runs. Durations arrive as
// milliseconds; "now" is the database's now(), except in the statements that
// compute or compare lease expiries and due times (claim, heartbeat, ack, nack,
// release, reclaim, dispatch, the sweep and the repair pass): there it is
// coalesce($n::timestamptz, now()), $n being the Store's clock (WithClock) or
// NULL, so tests set the clock instead of sleeping. The statements that say how
// long to wait (nextDue, newlyDue, nextLeaseExpiry) feed wall-clock timers and
// keep the database's now().

const queueColumns = `name, max_retries, rate_limit, rate_burst, max_concurrency,
	backoff_base_ms, backoff_max_ms, paused, priority_aging_ms, push, push_secret, created_at, updated_at`

const insertQueue = `INSERT INTO queues (name, max_retries, rate_limit, rate_burst, max_concurrency,
	backoff_base_ms, backoff_max_ms, paused, priority_aging_ms, push, push_secret)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (name) DO NOTHING
RETURNING ` + queueColumns

const getQueue = `SELECT ` + queueColumns + ` FROM queues WHERE name = $1`

const listQueues = `SELECT ` + queueColumns + ` FROM queues ORDER BY name`

const updateQueue = `UPDATE queues SET max_retries = $2, rate_limit = $3, rate_burst = $4,
	max_concurrency = $5, backoff_base_ms = $6, backoff_max_ms = $7, paused = $8,
	priority_aging_ms = $9, push = $10, push_secret = $11, updated_at = now()
WHERE name = $1
RETURNING ` + queueColumns

// lockQueueForDelete blocks new enqueues (their foreign-key check needs KEY SHARE)
// until the deleting transaction ends.
const lockQueueForDelete = `SELECT name FROM queues WHERE name = $1 FOR UPDATE`

// holdsLiveTasks: does the queue hold a task that is not finished (or is dead)?
// EXISTS stops at the first, however large the backlog.
const holdsLiveTasks = `SELECT EXISTS (SELECT 1 FROM tasks
WHERE queue = $1 AND status IN ('pending', 'blocked', 'claimed', 'executing', 'retry', 'dead'))`

const deleteQueue = `DELETE FROM queues WHERE name = $1`

const taskColumns = `id, queue, payload, priority, status, scheduled_at, attempts, max_retries,
	timeout_seconds, idempotency_key, fingerprint, last_error, result, claimed_by, lease_token,
	heartbeat_at, lease_expires_at, cancel_requested, replayed_from, replay_count, replayed_at,
	attempt_started_at, traceparent, releases, progress, created_at, updated_at, finished_at, schedule,
	workflow_id, step`

// taskColumnsOf is taskColumns qualified by the alias t.
const taskColumnsOf = `t.id, t.queue, t.payload, t.priority, t.status, t.scheduled_at, t.attempts,
	t.max_retries, t.timeout_seconds, t.idempotency_key, t.fingerprint, t.last_error, t.result,
	t.claimed_by, t.lease_token, t.heartbeat_at, t.lease_expires_at, t.cancel_requested,
	t.replayed_from, t.replay_count, t.replayed_at, t.attempt_started_at, t.traceparent, t.releases,
	t.progress, t.created_at, t.updated_at, t.finished_at, t.schedule, t.workflow_id, t.step`

// enqueueTasks is an enqueue's whole write, one statement and one round trip (a
// commit with it, outside a transaction). In order:
//
//   - q reads the queue's default budget and holds KEY SHARE, so that a concurrent
//     DeleteQueue waits for the enqueue to finish (and then sees its tasks). No queue,
//     no row in q, and nothing is inserted.
//   - When $13 asks, q also says whether tasks due now may go straight to the buffer:
//     the queue is not paused and holds no due task the dispatcher has yet to move
//     (one probe of tasks_dispatch_idx per priority level), so none jumps ahead of
//     older work. The ORDER BY is the index's own order, and keeps the probe on it:
//     without it, once ANALYZE has seen other queues' backlogs, the planner takes
//     LIMIT 1 for cheap on a sequential scan of the whole table (80 ms at 40,000 rows,
//     seconds at 2 million).
//   - ins inserts the batch in input order ($12: the schedule that fired them, or
//     NULL); those without a scheduled_at go in dispatched ('claimed') when q allows,
//     as the dispatcher would leave them, for the caller to mirror into the buffer. A
//     task whose idempotency key the queue already holds is skipped (ON CONFLICT DO
//     NOTHING waits for a concurrent inserter of the same key, so concurrent
//     identical requests create one task).
//   - tallied appends the count deltas on a hot-path connection (inlineTally).
//   - wake notifies the dispatchers ($2 names the channel) when a task went in
//     pending; the final WHERE is what makes PostgreSQL evaluate it, once.
//
// enqueueTaskRefs is the same write returning taskRefColumns only: a bulk load
// answered with ids did not need the other 27 columns of a thousand rows, which
// were a third of serve's CPU per batch (decoding them) and PostgreSQL's to send.
var (
	enqueueTasks    = enqueueStatement(taskColumns)
	enqueueTaskRefs = enqueueStatement(taskRefColumns)
)

// taskRefColumns are what an enqueue must know of the tasks it inserted to mirror
// them into the buffer (scanTaskRefs reads them).
const taskRefColumns = `id, status, priority, scheduled_at`

func enqueueStatement(returning string) string {
	return `WITH q AS MATERIALIZED (
	SELECT max_retries, $13::bool AND NOT paused AND NOT EXISTS (
		SELECT 1 FROM generate_series(1, 10) AS level(priority)
		CROSS JOIN LATERAL (
			SELECT 1 FROM tasks
			WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
				AND scheduled_at <= now()
			ORDER BY scheduled_at
			LIMIT 1
		) due
	) AS buffered
	FROM queues WHERE name = $1 FOR KEY SHARE
), ins AS (
	INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at,
		max_retries, timeout_seconds, idempotency_key, fingerprint, traceparent, schedule, dispatched_at)
	SELECT i.id, $1, i.payload::jsonb, i.priority,
		CASE WHEN q.buffered AND i.scheduled_at IS NULL THEN 'claimed' ELSE 'pending' END,
		coalesce(i.scheduled_at, now()),
		coalesce(i.max_retries, q.max_retries), i.timeout_seconds, i.idempotency_key, i.fingerprint, $11, $12,
		CASE WHEN q.buffered AND i.scheduled_at IS NULL THEN now() END
	FROM unnest($3::uuid[], $4::text[], $5::int[], $6::timestamptz[], $7::int[], $8::int[],
		$9::text[], $10::bytea[])
		WITH ORDINALITY AS i(id, payload, priority, scheduled_at, max_retries, timeout_seconds,
			idempotency_key, fingerprint, ord)
	CROSS JOIN q
	ORDER BY i.ord
	ON CONFLICT (queue, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
	RETURNING ` + returning + `
), tallied AS (
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT $1, status, '-infinity', count(*) FROM ins WHERE ` + inlineTally + ` GROUP BY status
), wake AS (
	SELECT pg_notify($2, $1) FROM (SELECT 1 FROM ins WHERE status = 'pending' LIMIT 1) pending
)
SELECT * FROM ins WHERE (SELECT count(*) FROM wake) >= 0`
}

const tasksByIdempotencyKey = `SELECT ` + taskColumns + ` FROM tasks
WHERE queue = $1 AND idempotency_key = ANY($2::text[])`

// notifyDue wakes dispatchers (LISTEN taskforge_due) for a queue with due work.
const notifyDue = `SELECT pg_notify($1, $2)`

const getTask = `SELECT ` + taskColumns + ` FROM tasks WHERE queue = $1 AND id = $2`

const taskAttempts = `SELECT attempt, worker_id, status, started_at, finished_at, error
FROM attempts WHERE task_id = $1 ORDER BY attempt`

// listTasks: newest first, keyset-paginated on (created_at, id), among the tasks
// whose status is one of $2 (every status, for an unfiltered list). Other null
// filters match all. Each status is one probe of tasks_status_list_idx in its own
// order, stopped by LIMIT; the probes' pages are merged. (No index orders a queue's
// tasks by age alone: see migration 0014.)
const listTasks = `SELECT ` + taskColumns + ` FROM unnest($2::text[]) AS s(wanted)
CROSS JOIN LATERAL (
	SELECT ` + taskColumns + ` FROM tasks
	WHERE queue = $1 AND status = s.wanted
		AND ($3::text IS NULL OR claimed_by = $3)
		AND ($4::timestamptz IS NULL OR created_at >= $4)
		AND ($5::timestamptz IS NULL OR created_at < $5)
		AND ($6::timestamptz IS NULL OR (created_at, id) < ($6, $7::uuid))
	ORDER BY created_at DESC, id DESC
	LIMIT $8
) t
ORDER BY created_at DESC, id DESC
LIMIT $8`

// cancelTask ends a waiting task at once, or flags an executing one for its worker.
// It returns the task and the status it had. A workflow step it cancels ends its
// workflow cancelled (stepsEnded).
var cancelTask = `WITH wf_locked AS MATERIALIZED (
	SELECT w.id FROM workflows w
	WHERE w.id = (SELECT workflow_id FROM tasks WHERE queue = $1 AND id = $2)
	FOR UPDATE
), prev AS (
	SELECT id, status FROM tasks
	WHERE queue = $1 AND id = $2 AND status IN ('pending', 'blocked', 'claimed', 'retry', 'executing')
		AND (SELECT count(*) FROM wf_locked) >= 0
	FOR UPDATE
), cancelled AS (
UPDATE tasks t SET
	status = CASE WHEN prev.status = 'executing' THEN 'executing' ELSE 'cancelled' END,
	cancel_requested = (prev.status = 'executing'),
	finished_at = CASE WHEN prev.status = 'executing' THEN t.finished_at ELSE now() END,
	updated_at = now()
FROM prev WHERE t.id = prev.id
RETURNING ` + taskColumnsOf + `, prev.status AS from_status
)` + stepsEnded("cancelled") + `
SELECT ` + taskColumns + `, from_status, fx.effects AS wf_effects FROM cancelled` + effectsOf("cancelled")

const taskStatus = `SELECT status FROM tasks WHERE queue = $1 AND id = $2`

// Tally: the counts that migration 0008's triggers keep (see tally.go).

// foldTally moves up to $1 of the oldest deltas into queue_tally and returns how
// many it moved. DELETE ... RETURNING takes each delta exactly once, whatever the
// number of replicas folding; SKIP LOCKED lets them fold different deltas at once,
// and the ordered upsert keeps two folders from deadlocking on the same totals.
const foldTally = `WITH d AS (
	DELETE FROM queue_tally_delta WHERE id IN (
		SELECT id FROM queue_tally_delta ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
	RETURNING queue, metric, bucket, delta
), folded AS (
	INSERT INTO queue_tally AS t (queue, metric, bucket, n)
	SELECT queue, metric, bucket, sum(delta)::bigint FROM d
	GROUP BY queue, metric, bucket ORDER BY queue, metric, bucket
	ON CONFLICT (queue, metric, bucket) DO UPDATE SET n = t.n + EXCLUDED.n
)
SELECT count(*) FROM d`

// tallyWindow is the start of the throughput window: the last five whole 10-second
// buckets and the current one, so the window is 50 to 60 seconds long.
const tallyWindow = `date_bin('10 seconds', now(), 'epoch') - interval '50 seconds'`

// queueTally sums the totals and the deltas not folded yet of the queues $1 (NULL =
// every queue): task counts by status, and attempt outcomes within the window, with
// the window's length in seconds. Its cost is the number of such rows: a few per
// status and per bucket, however many tasks the queues hold.
const queueTally = `WITH w AS (SELECT ` + tallyWindow + ` AS start)
SELECT c.queue, c.metric, sum(c.n)::bigint, extract(epoch FROM now() - w.start)::float8
FROM (
	SELECT queue, metric, bucket, n FROM queue_tally WHERE $1::text[] IS NULL OR queue = ANY($1)
	UNION ALL
	SELECT queue, metric, bucket, delta FROM queue_tally_delta WHERE $1::text[] IS NULL OR queue = ANY($1)
) c, w
WHERE c.bucket = '-infinity' OR c.bucket >= w.start
GROUP BY c.queue, c.metric, w.start`

// oldestWaiting is, for each queue of $1, the age in seconds of its oldest task
// that is due and not yet running: the head of its due pending and retry tasks (one
// probe of tasks_queue_due_idx) or its oldest buffered task (bounded by the
// buffer's size), whichever is older.
const oldestWaiting = `SELECT q.name, extract(epoch FROM now() - least(
	(SELECT min(scheduled_at) FROM tasks WHERE queue = q.name AND status IN ('pending', 'retry')
		AND priority > 0 AND scheduled_at <= now()),
	(SELECT min(scheduled_at) FROM tasks WHERE queue = q.name AND status = 'claimed'
		AND scheduled_at <= now())))::float8
FROM unnest($1::text[]) AS q(name)`

// deleteQueueTally forgets the figures of a queue being deleted (or created afresh).
const deleteQueueTally = `WITH gone AS (DELETE FROM queue_tally WHERE queue = $1)
DELETE FROM queue_tally_delta WHERE queue = $1`

// deleteOldBuckets deletes attempt-outcome buckets older than $1 ms (the totals of
// task statuses stay).
const deleteOldBuckets = `DELETE FROM queue_tally WHERE bucket <> '-infinity'
	AND bucket < now() - $1 * interval '1 millisecond'`

// recountQueue counts a queue's tasks by status the slow way, for CheckTally.
const recountQueue = `SELECT status, count(*) FROM tasks WHERE queue = $1 GROUP BY status`

// dispatchDue moves up to $2 due tasks of a queue from pending/retry to claimed, in
// buffer order: by eligible time plus $3 ms per priority level (strict priority when
// $3 is huge), at time $4 (NULL: now()). It reads the head of each priority level
// through tasks_dispatch_idx and merges them, so its cost does not grow with the
// backlog. SKIP LOCKED lets several dispatchers work the same queue.
const dispatchDue = `WITH due AS (
	SELECT head.id, head.status FROM generate_series(1, 10) AS level(priority)
	CROSS JOIN LATERAL (
		SELECT id, status, scheduled_at FROM tasks
		WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
			AND scheduled_at <= coalesce($4::timestamptz, now())
		ORDER BY scheduled_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	) head
	ORDER BY head.scheduled_at + (level.priority - 1) * $3::float8 * interval '1 millisecond'
	LIMIT $2
)
UPDATE tasks t SET status = 'claimed', dispatched_at = coalesce($4::timestamptz, now()),
	updated_at = coalesce($4::timestamptz, now())
FROM due WHERE t.id = due.id
RETURNING t.id, t.priority, t.scheduled_at, due.status AS from_status, t.traceparent`

// nextDue is how many seconds until the earliest waiting task due after $1 (the
// database clock of the dispatcher's last timed pass) becomes due: negative when it
// is due already, NULL when none waits. One probe of tasks_due_at_idx (the tasks
// written to wait: scheduled ahead or backing off), whatever the number of queues or
// of due tasks. A paused queue's task may answer; the pass it wakes then finds
// nothing to move, and looks past it next time.
const nextDue = `SELECT extract(epoch FROM min(scheduled_at) - now())::float8 FROM tasks
WHERE status IN ('pending', 'retry') AND scheduled_at > updated_at AND scheduled_at > $1`

// newlyDue lists the unpaused queues holding a task written to wait that became due
// after $1 (and is due now), with the database clock, which the caller passes back
// as the next $1. It reads tasks_due_at_idx from $1 on: its cost is the number of
// tasks that became due, not the number of queues or of waiting tasks.
const newlyDue = `SELECT coalesce(array_agg(DISTINCT d.queue) FILTER (WHERE NOT q.paused), '{}'), now()
FROM (SELECT queue FROM tasks
	WHERE status IN ('pending', 'retry') AND scheduled_at > updated_at
		AND scheduled_at > $1 AND scheduled_at <= now()) d
JOIN queues q ON q.name = d.queue`

// dueQueues lists every unpaused queue holding a due pending or retry task: the
// periodic sweep's one statement, one probe of tasks_queue_due_idx per queue (which
// only statements saying "priority > 0" may use), at time $1 (NULL: now()).
const dueQueues = `SELECT q.name FROM queues q
WHERE NOT q.paused AND EXISTS (SELECT 1 FROM tasks t
	WHERE t.queue = q.name AND t.status IN ('pending', 'retry') AND t.priority > 0
		AND t.scheduled_at <= coalesce($1::timestamptz, now()))`

// disableJIT turns JIT compilation off for a session (see Connect).
const disableJIT = `SET jit = off`

// hotPathSettings are the session settings of a hot-path connection (see
// HotPathSettings).
const hotPathSettings = `SET plan_cache_mode = force_generic_plan; SET taskforge.tally = 'inline'`

// inlineTally is true on a hot-path connection, where the statements below that
// append their own count deltas (enqueueTasks, claimTasks, ackPlainTasks) do, and the
// tally triggers stand aside (migration 0013); elsewhere the triggers count.
const inlineTally = `tally_written_inline()`

// plainLeaseToken is the lease token of a claim of a task outside a workflow: a
// random UUID of version 8 (RFC 9562's vendor-specific version), where a workflow
// step's is of version 4, so that an ack can be sent to the statement for its kind
// of task before anything is read (PlainLeaseToken). A token is only ever matched
// whole, so one of the wrong kind is simply not the task's token.
const plainLeaseToken = `overlay(gen_random_uuid()::text PLACING '8' FROM 15)::uuid`

// dbNow is the database clock.
const dbNow = `SELECT now()`

// queuesNamed returns the named queues' settings.
const queuesNamed = `SELECT ` + queueColumns + ` FROM queues WHERE name = ANY($1::text[])`

// queuesChangedSince returns the queues updated at or after $1, with the database
// clock for the next call.
const queuesChangedSince = `SELECT ` + queueColumns + `, now() AS read_at FROM queues WHERE updated_at >= $1`

// listBuffered pages through every queue's buffered tasks mirrored at least $3 ms
// ago, in (dispatched_at, id) order after ($1, $2), up to $4 of them, so the repair
// pass checks a bounded number per statement whatever the number of queues. $5 is
// the time (NULL: now()).
const listBuffered = `SELECT id, queue, priority, scheduled_at, status AS from_status, traceparent,
	dispatched_at FROM tasks
WHERE status = 'claimed' AND dispatched_at <= coalesce($5::timestamptz, now()) - $3 * interval '1 millisecond'
	AND ($1::timestamptz IS NULL OR (dispatched_at, id) > ($1, $2::uuid))
ORDER BY dispatched_at, id
LIMIT $4`

// executingInCappedQueues lists the executing tasks of every queue with a
// concurrency cap, to rebuild the slots; bounded by the caps' sum.
const executingInCappedQueues = `SELECT q.name, coalesce(array_agg(t.id) FILTER (WHERE t.id IS NOT NULL), '{}')
FROM queues q LEFT JOIN tasks t ON t.queue = q.name AND t.status = 'executing'
WHERE q.max_concurrency IS NOT NULL
GROUP BY q.name`

// byPrimaryKey: the statements that take tasks by id (claim, heartbeat, ack, and nack
// and release through leaseHeld) write their status guard as
//
//	t.status || '' = 'executing'
//
// which reads the same but from which no partial index's predicate can be proven.
// With t.status = '…', the planner may take a partial index of that status instead
// of the primary key (tasks_buffered_idx for 'claimed', tasks_lease_idx for
// 'executing'), and when its statistics were taken while few tasks had that
// status (an idle queue, or autovacuum not yet caught up after a burst) it does,
// and then reads the whole index for each id: every buffered task of
// every queue per claimed task, every executing task per acked one. Seen in E1 at
// 20,000 tasks: a 16-task claim read 1,300 buffers of tasks_buffered_idx in 4–13 ms,
// and an ack batch 4,713 entries of tasks_lease_idx. The primary key costs a few
// buffers per id whatever the status counts.
//
// claimTasks turns buffered ids that are still 'claimed' into executing tasks, each
// for the worker given with it ($1 ids, $2 worker ids), with a fresh lease of $3 ms
// from $4 (NULL: now()), and records each new attempt, in one statement. Ids no
// longer claimable (cancelled, already taken by another replica) are skipped; an id
// given twice is claimed once. A task outside a workflow gets a plainLeaseToken. On
// a hot-path connection it appends its count deltas (inlineTally).
const claimTasks = `WITH input AS (
	SELECT DISTINCT ON (id) id, worker FROM unnest($1::uuid[], $2::text[]) AS i(id, worker)
), claimed AS (
	UPDATE tasks t SET
		status = 'executing',
		attempts = t.attempts + 1,
		claimed_by = i.worker,
		lease_token = CASE WHEN t.workflow_id IS NULL THEN ` + plainLeaseToken + ` ELSE gen_random_uuid() END,
		heartbeat_at = coalesce($4::timestamptz, now()),
		attempt_started_at = coalesce($4::timestamptz, now()),
		lease_expires_at = least(coalesce($4::timestamptz, now()) + $3 * interval '1 millisecond',
			coalesce($4::timestamptz, now()) + t.timeout_seconds * interval '1 second'),
		deadline_at = coalesce($4::timestamptz, now()) + t.timeout_seconds * interval '1 second',
		cancel_requested = false,
		progress = NULL, -- a new attempt starts with no progress reported
		updated_at = coalesce($4::timestamptz, now())
	FROM input i
	WHERE t.id = i.id AND t.status || '' = 'claimed' -- by primary key: see byPrimaryKey
	RETURNING ` + taskColumnsOf + `
), recorded AS (
	INSERT INTO attempts (task_id, attempt, queue, worker_id, lease_token, status, started_at)
	SELECT id, attempts, queue, claimed_by, lease_token, 'executing', coalesce($4::timestamptz, now()) FROM claimed
), tallied AS (
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT c.queue, m.metric, '-infinity', m.sign * count(*)
	FROM claimed c CROSS JOIN (VALUES ('claimed', -1), ('executing', 1)) AS m(metric, sign)
	WHERE ` + inlineTally + `
	GROUP BY c.queue, m.metric, m.sign
)
SELECT ` + taskColumns + ` FROM claimed`

// leaseHeld is the condition under which a worker's call on a task counts, at the
// time the statement's parameter now names (NULL: now()), found by primary key
// (byPrimaryKey).
func leaseHeld(now string) string {
	return `t.id = $1 AND t.lease_token = $2 AND t.claimed_by = $3
	AND t.status || '' = 'executing' AND t.lease_expires_at > coalesce(` + now + `::timestamptz, now())`
}

// heartbeatTask extends a held lease, never past the attempt's deadline, and when
// $5 stores $6 as the attempt's progress (NULL clears it); $7 is the time (NULL: now()).
var heartbeatTask = `UPDATE tasks t SET
	lease_expires_at = least(coalesce($7::timestamptz, now()) + $4 * interval '1 millisecond', t.deadline_at),
	heartbeat_at = coalesce($7::timestamptz, now()),
	progress = CASE WHEN $5::bool THEN $6::jsonb ELSE t.progress END
WHERE ` + leaseHeld("$7") + `
RETURNING t.lease_expires_at, t.cancel_requested`

// heartbeatTasks is heartbeatTask for a batch of ($1 ids, $2 tokens) held by
// worker $3, in one statement, at time $5 (NULL: now()); it leaves progress alone.
const heartbeatTasks = `UPDATE tasks t SET
	lease_expires_at = least(coalesce($5::timestamptz, now()) + $4 * interval '1 millisecond', t.deadline_at),
	heartbeat_at = coalesce($5::timestamptz, now())
FROM unnest($1::uuid[], $2::uuid[]) AS h(id, token)
WHERE t.id = h.id AND t.lease_token = h.token AND t.claimed_by = $3
	AND t.status || '' = 'executing' -- by primary key: see byPrimaryKey
	AND t.lease_expires_at > coalesce($5::timestamptz, now())
RETURNING t.id, t.lease_expires_at, t.cancel_requested`

const upsertWorker = `INSERT INTO workers (id, queues, last_heartbeat_at) VALUES ($1, $2, now())
ON CONFLICT (id) DO UPDATE SET last_heartbeat_at = now(),
	queues = CASE WHEN cardinality(EXCLUDED.queues) > 0 THEN EXCLUDED.queues ELSE workers.queues END`

// ackedAndRecorded are the CTEs of an ack (after its input CTE): each input row (task,
// token, worker, result) whose lease is held, and which meets guard, marks its task
// done (acked) and its attempt succeeded (recorded); $5 is the time (NULL: now()).
func ackedAndRecorded(guard, returning string) string {
	return `acked AS (
	UPDATE tasks t SET status = 'done', result = i.result::jsonb,
		finished_at = coalesce($5::timestamptz, now()), updated_at = coalesce($5::timestamptz, now()),
		lease_expires_at = NULL, deadline_at = NULL
	FROM input i
	WHERE t.id = i.id AND t.lease_token = i.token AND t.claimed_by = i.worker
		AND t.status || '' = 'executing' -- by primary key: see byPrimaryKey
		AND t.lease_expires_at > coalesce($5::timestamptz, now())
		AND ` + guard + `
	RETURNING ` + returning + `
), recorded AS (
	UPDATE attempts a SET status = 'succeeded', finished_at = coalesce($5::timestamptz, now())
	FROM acked WHERE a.task_id = acked.id AND a.attempt = acked.attempts
	RETURNING a.queue, a.finished_at
)`
}

// ackInput is the input of the ack statements: ($1 ids, $2 tokens, $3 worker ids, $4
// results).
const ackInput = `input AS (
	SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) AS i(id, token, worker, result)
)`

// ackTasks acks a batch: each input row whose lease is held marks its task done and
// its attempt succeeded (ackedAndRecorded). Rows whose lease is not held change
// nothing and are simply absent from the result. The dependents of workflow steps it
// finishes are unblocked in the same statement (stepsDone).
var ackTasks = `WITH ` + ackInput + `, ` + workflowLockForIDs + `, ` +
	ackedAndRecorded(`(SELECT count(*) FROM wf_locked) >= 0`, taskColumnsOf) + stepsDone("acked") + `
SELECT ` + taskColumns + `, fx.effects AS wf_effects
FROM acked CROSS JOIN woken LEFT JOIN step_effects fx ON fx.effect_of = acked.id`

// ackPlainTasks is ackTasks for tasks outside a workflow, which it alone may ack:
// a workflow step's row is left as it is, as if its lease were not held. Without
// the workflow CTEs PostgreSQL has a third of ackTasks' plan to set up on each call.
// On a hot-path connection it appends its count deltas (inlineTally): executing to
// done, and the attempt's outcome in its 10-second bucket.
var ackPlainTasks = ackPlainStatement(taskColumnsOf, taskColumns+`, NULL::jsonb AS wf_effects`)

// ackPlainTaskRefs is ackPlainTasks returning ackRefColumns only, for acks whose
// answer carries no task (a poll's, or a batch's with the minimal answer): reading
// back a task's 31 columns, its payload and result among them, to drop them was
// 15 % of serve's CPU under batched load.
var ackPlainTaskRefs = ackPlainStatement(ackRefColumnsOf, ackRefColumns)

// ackRefColumns are what the lifecycle needs of a plain task it acked
// (scanAckRefs reads them): which ack won, and what to report.
const (
	ackRefColumns   = `id, queue, status, attempts, lease_token, attempt_started_at, traceparent, updated_at, finished_at`
	ackRefColumnsOf = `t.id, t.queue, t.status, t.attempts, t.lease_token, t.attempt_started_at, t.traceparent, t.updated_at, t.finished_at`
)

func ackPlainStatement(returning, selected string) string {
	return `WITH ` + ackInput + `, ` + ackedAndRecorded(`t.workflow_id IS NULL`, returning) + `, tallied AS (
	INSERT INTO queue_tally_delta (queue, metric, bucket, delta)
	SELECT queue, metric, bucket, sum(n) FROM (
		SELECT queue, 'executing' AS metric, '-infinity'::timestamptz AS bucket, -1 AS n FROM acked
		UNION ALL
		SELECT queue, 'done', '-infinity', 1 FROM acked
		UNION ALL
		SELECT queue, 'attempt:succeeded', date_bin('10 seconds', finished_at, 'epoch'), 1 FROM recorded
	) d
	WHERE ` + inlineTally + `
	GROUP BY queue, metric, bucket
)
SELECT ` + selected + ` FROM acked`
}

// backoffMs is the retry delay after failed attempt n = t.attempts (1-based):
// min(base * 2^(n-1) + rand(0, base), max), from the queue q.
const backoffMs = `least(q.backoff_base_ms * power(2::float8, t.attempts - 1)
	+ floor(random() * (q.backoff_base_ms + 1)), q.backoff_max_ms::float8)`

// nackTask ends the current attempt as failed (or cancelled, when a cancel was
// requested) and moves the task to retry, dead or cancelled; a workflow step that
// ends dead or cancelled ends its workflow (stepsEnded). $7 is the time (NULL: now()).
var nackTask = `WITH ` + workflowLockForID + `, cur AS (
	SELECT t.id,
		CASE WHEN t.cancel_requested THEN 'cancelled'
			WHEN NOT $4 OR t.attempts - t.releases > t.max_retries THEN 'dead'
			ELSE 'retry' END AS next_status,
		coalesce($7::timestamptz, now()) + coalesce($5::float8, ` + backoffMs + `) * interval '1 millisecond' AS retry_at
	FROM tasks t JOIN queues q ON q.name = t.queue
	WHERE ` + leaseHeld("$7") + ` AND (SELECT count(*) FROM wf_locked) >= 0
	FOR UPDATE OF t
), nacked AS (
	UPDATE tasks t SET status = cur.next_status, last_error = $6, updated_at = coalesce($7::timestamptz, now()),
		lease_expires_at = NULL, deadline_at = NULL,
		scheduled_at = CASE WHEN cur.next_status = 'retry' THEN cur.retry_at ELSE t.scheduled_at END,
		finished_at = CASE WHEN cur.next_status = 'retry' THEN NULL ELSE coalesce($7::timestamptz, now()) END
	FROM cur WHERE t.id = cur.id
	RETURNING ` + taskColumnsOf + `
), recorded AS (
	UPDATE attempts a SET finished_at = coalesce($7::timestamptz, now()), error = $6,
		status = CASE WHEN nacked.status = 'cancelled' THEN 'cancelled' ELSE 'failed' END
	FROM nacked WHERE a.task_id = nacked.id AND a.attempt = nacked.attempts
)` + stepsEnded("nacked") + `
SELECT ` + taskColumns + `, fx.effects AS wf_effects FROM nacked` + effectsOf("nacked")

// releaseTask ends the current attempt as released, not counted against the retry
// budget, and puts the task back in line where it was (pending, its scheduled_at
// unchanged, so it keeps its place), or cancels it when a cancel was requested.
// With a delay of $5 ms (a snooze) the task is due no earlier than now + $5; $6 is
// the time (NULL: now()).
var releaseTask = `WITH ` + workflowLockForID + `, cur AS (
	SELECT t.id, CASE WHEN t.cancel_requested THEN 'cancelled' ELSE 'pending' END AS next_status
	FROM tasks t
	WHERE ` + leaseHeld("$6") + ` AND (SELECT count(*) FROM wf_locked) >= 0
	FOR UPDATE OF t
), released AS (
	UPDATE tasks t SET status = cur.next_status, last_error = $4, updated_at = coalesce($6::timestamptz, now()),
		lease_expires_at = NULL, deadline_at = NULL,
		releases = t.releases + CASE WHEN cur.next_status = 'pending' THEN 1 ELSE 0 END,
		scheduled_at = CASE WHEN cur.next_status = 'pending' AND $5::bigint IS NOT NULL
			THEN greatest(t.scheduled_at, coalesce($6::timestamptz, now()) + $5 * interval '1 millisecond')
			ELSE t.scheduled_at END,
		finished_at = CASE WHEN cur.next_status = 'pending' THEN NULL ELSE coalesce($6::timestamptz, now()) END
	FROM cur WHERE t.id = cur.id
	RETURNING ` + taskColumnsOf + `
), recorded AS (
	UPDATE attempts a SET finished_at = coalesce($6::timestamptz, now()), error = $4,
		status = CASE WHEN released.status = 'cancelled' THEN 'cancelled' ELSE 'released' END
	FROM released WHERE a.task_id = released.id AND a.attempt = released.attempts
)` + stepsEnded("released") + `
SELECT ` + taskColumns + `, fx.effects AS wf_effects FROM released` + effectsOf("released")

// reclaimExpired ends up to $1 attempts whose lease (which never outlives the
// attempt's deadline) has expired: timed_out when the deadline passed, abandoned
// otherwise, cancelled when a cancel was requested. The task retries while budget
// remains, else it is dead. $2 is the time (NULL: now()). SKIP LOCKED lets several
// watchdogs run at once.
var reclaimExpired = `WITH cur AS (
	SELECT t.id,
		CASE WHEN t.cancel_requested THEN 'cancelled'
			WHEN t.attempts - t.releases > t.max_retries THEN 'dead'
			ELSE 'retry' END AS next_status,
		CASE WHEN t.cancel_requested THEN 'cancelled'
			WHEN t.deadline_at <= coalesce($2::timestamptz, now()) THEN 'timed_out'
			ELSE 'abandoned' END AS outcome,
		coalesce($2::timestamptz, now()) + ` + backoffMs + ` * interval '1 millisecond' AS retry_at
	FROM tasks t JOIN queues q ON q.name = t.queue
	WHERE t.status = 'executing' AND t.lease_expires_at <= coalesce($2::timestamptz, now())
	ORDER BY t.lease_expires_at
	LIMIT $1
	FOR UPDATE OF t SKIP LOCKED
), ended AS (
	UPDATE tasks t SET status = cur.next_status, updated_at = coalesce($2::timestamptz, now()),
		last_error = CASE cur.outcome
			WHEN 'timed_out' THEN 'attempt timed out after ' || t.timeout_seconds || ' s'
			WHEN 'abandoned' THEN 'lease expired: worker ' || t.claimed_by || ' stopped heartbeating'
			ELSE t.last_error END,
		lease_expires_at = NULL, deadline_at = NULL,
		scheduled_at = CASE WHEN cur.next_status = 'retry' THEN cur.retry_at ELSE t.scheduled_at END,
		finished_at = CASE WHEN cur.next_status = 'retry' THEN NULL ELSE coalesce($2::timestamptz, now()) END
	FROM cur WHERE t.id = cur.id
	RETURNING t.id, t.queue, t.attempts, t.claimed_by, t.status, t.last_error, cur.outcome,
		-- attempts claimed before migration 0003 have no start on the task row
		coalesce(t.attempt_started_at, t.heartbeat_at, t.updated_at) AS attempt_started_at, t.updated_at,
		t.workflow_id, t.step
), recorded AS (
	UPDATE attempts a SET status = ended.outcome, finished_at = coalesce($2::timestamptz, now()), error = ended.last_error
	FROM ended WHERE a.task_id = ended.id AND a.attempt = ended.attempts
)` + stepsEnded("ended") + `
SELECT id, queue, attempts, claimed_by, status, outcome, attempt_started_at, updated_at, workflow_id, step,
	fx.effects AS wf_effects
FROM ended` + effectsOf("ended")

// workerHeartbeatAges: seconds since each worker seen within $1 ms last heartbeated.
const workerHeartbeatAges = `SELECT id, extract(epoch FROM now() - last_heartbeat_at)::float8 FROM workers
WHERE last_heartbeat_at > now() - $1 * interval '1 millisecond'`

// executingIDs lists a queue's executing tasks, to rebuild its concurrency slots.
const executingIDs = `SELECT id FROM tasks WHERE queue = $1 AND status = 'executing'`

// nextLeaseExpiry is when the watchdog next has work: the earliest lease expiry.
const nextLeaseExpiry = `SELECT extract(epoch FROM min(lease_expires_at) - now())::float8
FROM tasks WHERE status = 'executing'`

const listWorkers = `SELECT w.id, w.queues, w.last_heartbeat_at,
	coalesce(array_agg(t.id ORDER BY t.id) FILTER (WHERE t.id IS NOT NULL), '{}') AS current_tasks,
	w.last_heartbeat_at < now() - $1 * interval '1 millisecond' AS stale
FROM workers w LEFT JOIN tasks t ON t.claimed_by = w.id AND t.status = 'executing'
GROUP BY w.id
ORDER BY w.id`

// listDead: a queue's dead tasks, most recently died first, keyset-paginated.
const listDead = `SELECT ` + taskColumns + ` FROM tasks
WHERE queue = $1 AND status = 'dead'
	AND ($2::timestamptz IS NULL OR (finished_at, id) < ($2, $3::uuid))
ORDER BY finished_at DESC, id DESC
LIMIT $4`

// lockDead locks the dead tasks to replay: the given ids, or all when $3.
const lockDead = `SELECT id FROM tasks
WHERE queue = $1 AND status = 'dead' AND ($3 OR id = ANY($2::uuid[]))
ORDER BY finished_at, id
FOR UPDATE`

// replayDead creates a new pending task from each dead one (keeping the schedule that
// created it) and marks the dead ones replayed; the dead tasks keep their history.
const replayDead = `WITH src AS (
	SELECT t.*, u.ord FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord)
	JOIN tasks t ON t.id = u.id
), marked AS (
	UPDATE tasks t SET replay_count = t.replay_count + 1, replayed_at = now(), updated_at = now()
	FROM src WHERE t.id = src.id
)
INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries,
	timeout_seconds, replayed_from, schedule)
SELECT gen_random_uuid(), src.queue, src.payload, src.priority, 'pending', now(), src.max_retries,
	src.timeout_seconds, src.id, src.schedule
FROM src ORDER BY src.ord
RETURNING ` + taskColumns

const discardDead = `DELETE FROM tasks WHERE queue = $1 AND id = $2 AND status = 'dead'`

// queueNames lists every queue's name, in order.
const queueNames = `SELECT name FROM queues ORDER BY name`

const queueExists = `SELECT EXISTS (SELECT 1 FROM queues WHERE name = $1)`

// Retention

// setRetentionTimeouts bounds the rest of a retention transaction: $1 is in ms.
const setRetentionTimeouts = `SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true)`

// deleteExpiredTasks deletes up to $2 done or cancelled plain tasks of any queue that
// finished more than $1 ms ago, oldest first through tasks_finished_idx; their
// attempts go by ON DELETE CASCADE. SKIP LOCKED leaves rows that another transaction
// holds to a later batch.
const deleteExpiredTasks = `WITH doomed AS (
	SELECT id FROM tasks
	WHERE status IN ('done', 'cancelled') AND finished_at < now() - $1 * interval '1 millisecond'
		AND workflow_id IS NULL -- workflows go whole (expiredWorkflows)
	ORDER BY finished_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
DELETE FROM tasks t USING doomed WHERE t.id = doomed.id`

// deleteSilentWorkers deletes up to $2 workers not heard from for more than $1 ms.
const deleteSilentWorkers = `WITH doomed AS (
	SELECT id FROM workers
	WHERE last_heartbeat_at < now() - $1 * interval '1 millisecond'
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
DELETE FROM workers w USING doomed WHERE w.id = doomed.id`

// Tokens

const tokenColumns = `id, name, role, queues, rate_limit, created_at, expires_at, revoked_at`

const insertToken = `INSERT INTO api_tokens (name, role, queues, rate_limit, hash, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond')
RETURNING ` + tokenColumns

const listTokens = `SELECT ` + tokenColumns + ` FROM api_tokens ORDER BY created_at, id`

// lockActiveAdmins locks the admin tokens that still work, so that two concurrent
// revocations cannot both remove "the other" last admin.
const lockActiveAdmins = `SELECT id FROM api_tokens
WHERE role = 'admin' AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
ORDER BY id
FOR UPDATE`

const revokeToken = `UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
WHERE id = $1
RETURNING ` + tokenColumns

const countUnrevokedTokens = `SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL`

// tokenSnapshot is what every replica caches: each unrevoked token (expired ones
// included: they still switch authentication on) with its hash.
const tokenSnapshot = `SELECT ` + tokenColumns + `, hash FROM api_tokens WHERE revoked_at IS NULL`

// sessionSnapshot lists the live dashboard sessions of unrevoked tokens.
const sessionSnapshot = `SELECT s.hash, s.token_id, s.expires_at FROM dashboard_sessions s
JOIN api_tokens t ON t.id = s.token_id
WHERE t.revoked_at IS NULL AND s.expires_at > now()`

// insertSession records a session for token $1 lasting $3 ms (cut at the token's own
// expiry), and deletes expired sessions on the way.
const insertSession = `WITH swept AS (
	DELETE FROM dashboard_sessions WHERE expires_at <= now()
)
INSERT INTO dashboard_sessions (token_id, hash, expires_at)
SELECT t.id, $2, least(now() + $3 * interval '1 millisecond', t.expires_at)
FROM api_tokens t
WHERE t.id = $1 AND t.revoked_at IS NULL
RETURNING expires_at`

const deleteSession = `DELETE FROM dashboard_sessions WHERE hash = $1`

// Encryption at rest

// unsealedTasks lists, in id order after $2, up to $3 tasks whose payload, result,
// progress, last error or any attempt's error is not sealed with the current key ($1
// is the sealed prefix "v1.<key id>.", $4 the start of a sealed text with that key).
const unsealedTasks = `SELECT id, queue, payload, result, progress, last_error FROM tasks t
WHERE id > $2 AND (
	left(coalesce(payload->>'taskforge_sealed', ''), length($1)) <> $1
	OR (result IS NOT NULL AND left(coalesce(result->>'taskforge_sealed', ''), length($1)) <> $1)
	OR (progress IS NOT NULL AND left(coalesce(progress->>'taskforge_sealed', ''), length($1)) <> $1)
	OR (coalesce(last_error, '') <> '' AND left(last_error, length($4)) <> $4)
	OR EXISTS (SELECT 1 FROM attempts a WHERE a.task_id = t.id
		AND coalesce(a.error, '') <> '' AND left(a.error, length($4)) <> $4))
ORDER BY id
LIMIT $3
FOR UPDATE SKIP LOCKED`

// resealTasks stores re-sealed payloads, results, last errors and progress.
const resealTasks = `UPDATE tasks t SET payload = u.payload::jsonb, result = u.result::jsonb, last_error = u.last_error,
	progress = u.progress::jsonb
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(id, payload, result, last_error, progress)
WHERE t.id = u.id`

// unsealedAttemptErrors lists the attempts of tasks $1 whose error is not sealed
// with the current key ($2 as in unsealedTasks' $4).
const unsealedAttemptErrors = `SELECT task_id, attempt, error FROM attempts
WHERE task_id = ANY($1) AND coalesce(error, '') <> '' AND left(error, length($2)) <> $2
FOR UPDATE`

// resealAttemptErrors stores re-sealed attempt errors.
const resealAttemptErrors = `UPDATE attempts a SET error = u.error
FROM unnest($1::uuid[], $2::int[], $3::text[]) AS u(task_id, attempt, error)
WHERE a.task_id = u.task_id AND a.attempt = u.attempt`

// insertAudit records one operator action.
const insertAudit = `INSERT INTO audit_log (actor, token_id, via, remote_addr, method, route, queue, target, status, request)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// auditColumns are the columns of an AuditEntry.
const auditColumns = `id, at, actor, token_id, via, remote_addr, method, route, queue, target, status, request`

// listAudit: up to $3 entries newest first, older than id $2 (0 = from the newest),
// of queue $1 (NULL = all).
const listAudit = `SELECT ` + auditColumns + ` FROM audit_log
WHERE ($1::text IS NULL OR queue = $1) AND ($2::bigint = 0 OR id < $2)
ORDER BY id DESC LIMIT $3`

// deleteExpiredAudit deletes up to $2 entries older than $1 ms, oldest first (ids
// grow with time, so the primary key finds them without an index on at).
const deleteExpiredAudit = `DELETE FROM audit_log WHERE id IN (
	SELECT id FROM audit_log WHERE at < now() - $1 * interval '1 millisecond' ORDER BY id LIMIT $2)`

// Schedules (package scheduler fires them; migration 0010)

const scheduleColumns = `name, queue, cron, timezone, payload, priority, max_retries, timeout_seconds,
	paused, next_run_at, last_run_at, last_task_id, created_at, updated_at`

// insertSchedule creates a schedule; nothing is returned when the name is taken.
const insertSchedule = `INSERT INTO schedules (name, queue, cron, timezone, payload, priority,
	max_retries, timeout_seconds, paused, next_run_at)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10)
ON CONFLICT (name) DO NOTHING
RETURNING ` + scheduleColumns

const getSchedule = `SELECT ` + scheduleColumns + ` FROM schedules WHERE name = $1`

// lockSchedule is getSchedule holding the row until the transaction ends, with the
// database clock.
const lockSchedule = `SELECT ` + scheduleColumns + `, now() AS db_now FROM schedules WHERE name = $1 FOR UPDATE`

// listSchedules: by name, of queue $1 (NULL = every queue).
const listSchedules = `SELECT ` + scheduleColumns + ` FROM schedules
WHERE $1::text IS NULL OR queue = $1 ORDER BY name`

const updateSchedule = `UPDATE schedules SET queue = $2, cron = $3, timezone = $4, payload = $5::jsonb,
	priority = $6, max_retries = $7, timeout_seconds = $8, paused = $9, next_run_at = $10, updated_at = now()
WHERE name = $1
RETURNING ` + scheduleColumns

const deleteSchedule = `DELETE FROM schedules WHERE name = $1`

// claimDueSchedule locks the unpaused schedule whose tick is most overdue, skipping
// those another scheduler holds and those named in $1 (they failed this pass), and
// returns it with the database clock: one probe of schedules_due_idx, however many
// schedules exist.
const claimDueSchedule = `SELECT ` + scheduleColumns + `, now() AS db_now FROM schedules
WHERE NOT paused AND next_run_at IS NOT NULL AND next_run_at <= now() AND NOT (name = ANY($1::text[]))
ORDER BY next_run_at
LIMIT 1
FOR UPDATE SKIP LOCKED`

// scheduleFired records a fired tick ($2 next tick, $3 task, $4 when): last_run_at is
// when it fired.
const scheduleFired = `UPDATE schedules SET next_run_at = $2, last_task_id = $3, last_run_at = $4
WHERE name = $1`

// scheduleTriggered records a run now that leaves the next tick alone.
const scheduleTriggered = `UPDATE schedules SET last_task_id = $2, last_run_at = now() WHERE name = $1`

// nextScheduleIn is how many seconds until the earliest unpaused tick (NULL when
// none): one probe of schedules_due_idx.
const nextScheduleIn = `SELECT extract(epoch FROM min(next_run_at) - now())::float8 FROM schedules
WHERE NOT paused AND next_run_at IS NOT NULL`

// schedulesOfQueue names the schedules that target queue $1 (DeleteQueue refuses while any does).
const schedulesOfQueue = `SELECT name FROM schedules WHERE queue = $1 ORDER BY name LIMIT 20`

// unsealedSchedules lists the schedules whose payload is not sealed with the current
// key ($1 the sealed prefix, as in unsealedTasks); there are few, so all at once.
const unsealedSchedules = `SELECT name, payload FROM schedules
WHERE left(coalesce(payload->>'taskforge_sealed', ''), length($1)) <> $1
ORDER BY name
FOR UPDATE SKIP LOCKED`

const resealSchedule = `UPDATE schedules SET payload = $2::jsonb WHERE name = $1`

// Bulk operations (bulk.go): each statement is its own transaction over at most one
// batch of rows.

// bulkCancelWaiting cancels up to $3 tasks of queue $1 with status $2 (never
// executing), oldest first, in the order of tasks_status_list_idx (read backwards) so
// that LIMIT stops the index scan early. Oldest first, as the dispatcher and the
// sweep read a queue: the index entries each batch leaves dead are at the front of
// their scans, where bulkPruneHeads clears them batch by batch (newest first, they
// piled up behind the live tasks, and the first sweep after the last batch walked a
// million of them while its replica dispatched nothing). SKIP LOCKED passes over rows
// a claim or another batch holds, so a batch never waits on live traffic. It returns
// each task with the status it had and its position. bulkCancelWaitingAfter is the
// same from after the keyset position ($4, $5): each batch starts where the last
// ended, as an index condition, rather than rescanning the entries its predecessors
// left behind.
var bulkCancelWaiting = bulkCancelWaitingHead + bulkCancelWaitingTail

var bulkCancelWaitingAfter = bulkCancelWaitingHead + `
		AND (created_at, id) > ($4, $5::uuid)` + bulkCancelWaitingTail

const bulkCancelWaitingHead = `WITH c AS (
	SELECT id, status, created_at FROM tasks
	WHERE queue = $1 AND status = $2`

var bulkCancelWaitingTail = `
	ORDER BY created_at, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), bulk AS (
	UPDATE tasks t SET status = 'cancelled', finished_at = now(), updated_at = now()
	FROM c WHERE t.id = c.id
	RETURNING t.id, c.status AS from_status, t.attempts, c.created_at, t.status, t.workflow_id, t.step
)` + stepsEnded("bulk") + `
SELECT id, from_status, attempts, created_at, workflow_id, step, fx.effects AS wf_effects FROM bulk` + effectsOf("bulk")

// bulkPruneHeads reads the heads of queue $1 as the dispatcher does (each priority's
// first due task in tasks_dispatch_idx) and as the sweep does (dueQueues' probe of
// tasks_queue_due_idx), after a batch of a bulk cancel: its scans step over the index
// entries the batch left dead and mark them so (PostgreSQL's kill_prior_tuple), so
// the dispatcher's own scans, which run on the loop that serves every queue of a
// replica, never step over more than a batch of them. It changes nothing.
const bulkPruneHeads = `SELECT
	(SELECT count(*) FROM generate_series(1, 10) AS level(priority) CROSS JOIN LATERAL (
		SELECT 1 FROM tasks WHERE queue = $1 AND status IN ('pending', 'retry') AND priority = level.priority
			AND scheduled_at <= now()
		ORDER BY scheduled_at LIMIT 1) head),
	EXISTS (SELECT 1 FROM tasks WHERE queue = $1 AND status IN ('pending', 'retry') AND priority > 0
		AND scheduled_at <= now())`

// bulkCancelIDs cancels the tasks $2 of queue $1 as cancelTask does one: a waiting
// task ends cancelled, an executing one is flagged for its worker; finished tasks
// and ids of no task of the queue are left alone.
var bulkCancelIDs = `WITH c AS (
	SELECT id, status FROM tasks
	WHERE queue = $1 AND id = ANY($2::uuid[])
		AND status IN ('pending', 'claimed', 'retry', 'blocked', 'executing')
	ORDER BY id
	FOR UPDATE
), bulk AS (
	UPDATE tasks t SET
		status = CASE WHEN c.status = 'executing' THEN 'executing' ELSE 'cancelled' END,
		cancel_requested = (c.status = 'executing'),
		finished_at = CASE WHEN c.status = 'executing' THEN t.finished_at ELSE now() END,
		updated_at = now()
	FROM c WHERE t.id = c.id
	RETURNING t.id, c.status AS from_status, t.attempts, t.created_at, t.status, t.workflow_id, t.step
)` + stepsEnded("bulk") + `
SELECT id, from_status, attempts, created_at, workflow_id, step, fx.effects AS wf_effects FROM bulk` + effectsOf("bulk")

// bulkDiscardDead deletes up to $4 dead tasks of queue $1: those among $2, or any
// when $3. Their attempts go by ON DELETE CASCADE.
const bulkDiscardDead = `WITH doomed AS (
	SELECT id FROM tasks
	WHERE queue = $1 AND status = 'dead' AND ($3 OR id = ANY($2::uuid[]))
	LIMIT $4
	FOR UPDATE SKIP LOCKED
)
DELETE FROM tasks t USING doomed WHERE t.id = doomed.id`

// anyWithStatus: does queue $1 still hold a task whose status is one of $2?
const anyWithStatus = `SELECT EXISTS (SELECT 1 FROM tasks WHERE queue = $1 AND status = ANY($2::text[]))`

// anyDead: does queue $1 still hold a dead task among $2 (any, when $3)?
const anyDead = `SELECT EXISTS (SELECT 1 FROM tasks
WHERE queue = $1 AND status = 'dead' AND ($3 OR id = ANY($2::uuid[])))`

// Workflows (workflow.go; migration 0011). A workflow's bookkeeping rides inside the
// statements that end its steps' tasks, so it commits with them or not at all:
//   - workflowLockFor* lock the workflows of the tasks a statement is about to end
//     before any of those tasks, in id order: every statement that touches a
//     workflow takes the workflow first, so two of them never deadlock on it.
//   - stepsDone (after an ack) moves the dependents whose dependencies are now all
//     done from blocked to pending, wakes the dispatchers of their queues (NOTIFY on
//     commit, as an enqueue does), and ends the workflow succeeded with its last step.
//   - stepsEnded (after a task ended dead or cancelled) cancels every other
//     unfinished step (executing ones get cancel_requested), each with a last_error
//     naming the step, and ends the workflow failed or cancelled.
// Only the current task of a step counts (workflow_steps.task_id): a task a resume
// replaced changes nothing when it ends. Each statement reads workflow_steps in its
// own snapshot; where a resume may have committed since, the update re-checks the row
// it changes (task_id, generation) as PostgreSQL re-reads a row updated concurrently.

// workflowLockForIDs: the workflows of the tasks $1, locked in id order. Used as an
// InitPlan ("AND (SELECT count(*) FROM wf_locked) >= 0") so it runs before the
// statement locks any task.
const workflowLockForIDs = `wf_locked AS MATERIALIZED (
	SELECT w.id FROM workflows w
	WHERE w.id IN (SELECT workflow_id FROM tasks WHERE id = ANY($1::uuid[]) AND workflow_id IS NOT NULL)
	ORDER BY w.id
	FOR UPDATE
)`

// workflowLockForID is workflowLockForIDs for the one task $1.
const workflowLockForID = `wf_locked AS MATERIALIZED (
	SELECT w.id FROM workflows w
	WHERE w.id = (SELECT workflow_id FROM tasks WHERE id = $1)
	FOR UPDATE
)`

// stepsDone follows the CTE named src (task rows just made done: id, workflow_id,
// step). The final SELECT must read woken (one row) so that its NOTIFYs run, and
// joins step_effects (effect_of, effects) to report what each row's ack did to its
// workflow: the steps it unblocked (each credited to the first of its parents, in id
// order, that this statement finished) and, on the row of the newest step acked in
// it, the workflow's end. For a plain task these CTEs read nothing.
func stepsDone(src string) string {
	return `, done_steps AS MATERIALIZED (
	SELECT s.id, s.workflow_id, s.step, w.generation FROM ` + src + ` s
	JOIN workflow_steps ws ON ws.task_id = s.id
	JOIN workflows w ON w.id = s.workflow_id
	WHERE s.workflow_id IS NOT NULL
), freed AS (
	UPDATE workflow_steps c SET waiting_on = c.waiting_on - d.n
	FROM (SELECT e.workflow_id, e.child, cs.task_id, count(*) AS n, (array_agg(s.id ORDER BY s.id))[1] AS by_task
		FROM done_steps s
		JOIN workflow_edges e ON e.workflow_id = s.workflow_id AND e.parent = s.step
		JOIN workflow_steps cs ON cs.workflow_id = e.workflow_id AND cs.step = e.child
		GROUP BY 1, 2, 3) d
	WHERE c.workflow_id = d.workflow_id AND c.step = d.child AND c.task_id = d.task_id
	RETURNING c.task_id, c.waiting_on, d.by_task
), unblocked AS (
	UPDATE tasks t SET status = 'pending', scheduled_at = greatest(t.scheduled_at, now()), updated_at = now()
	FROM freed f WHERE t.id = f.task_id AND f.waiting_on = 0 AND t.status = 'blocked'
	RETURNING t.id, t.queue, t.step, f.by_task
), progressed AS (
	UPDATE workflows w SET steps_left = w.steps_left - d.n, updated_at = now(),
		status = CASE WHEN w.status = 'running' AND w.steps_left = d.n THEN 'succeeded' ELSE w.status END,
		finished_at = CASE WHEN w.status = 'running' AND w.steps_left = d.n THEN now() ELSE w.finished_at END
	FROM (SELECT workflow_id, generation, count(*) AS n, (array_agg(id ORDER BY id DESC))[1] AS by_task
		FROM done_steps GROUP BY 1, 2) d
	WHERE w.id = d.workflow_id AND w.generation = d.generation
	RETURNING w.id, w.status, w.steps_left, d.by_task
), woken AS (
	SELECT count(pg_notify('` + DueChannel + `', q.queue)) AS notified FROM (SELECT DISTINCT queue FROM unblocked) q
), step_effects AS (
	SELECT coalesce(u.by_task, p.by_task) AS effect_of,
		jsonb_build_object('workflow_ended', p.status, 'unblocked', coalesce(u.list, '[]'::jsonb)) AS effects
	FROM (SELECT by_task, jsonb_agg(jsonb_build_object('id', id, 'queue', queue, 'step', step) ORDER BY id) AS list
		FROM unblocked GROUP BY by_task) u
	FULL JOIN (SELECT by_task, status FROM progressed WHERE status = 'succeeded' AND steps_left = 0) p
		ON p.by_task = u.by_task
)`
}

// stepsEnded follows the CTE named src (task rows just ended: id, workflow_id, step,
// status); those dead or cancelled end their workflows. When several steps of one
// workflow end in one statement, a dead one names the failure. The final SELECT
// joins step_effects (effectsOf) to report, on the row of the step that ended a
// workflow, the workflow's end and the steps the cascade changed, each with the
// status it had (executing: flagged cancel_requested, still running).
func stepsEnded(src string) string {
	return `, failed_steps AS MATERIALIZED (
	SELECT DISTINCT ON (s.workflow_id) s.id AS by_task, s.workflow_id, s.step, s.status, w.generation FROM ` + src + ` s
	JOIN workflow_steps ws ON ws.task_id = s.id
	JOIN workflows w ON w.id = s.workflow_id
	WHERE s.workflow_id IS NOT NULL AND s.status IN ('dead', 'cancelled')
	ORDER BY s.workflow_id, s.status = 'dead' DESC, s.step
), ended_workflows AS (
	UPDATE workflows w SET status = CASE WHEN f.status = 'dead' THEN 'failed' ELSE 'cancelled' END,
		finished_at = now(), updated_at = now()
	FROM failed_steps f
	WHERE w.id = f.workflow_id AND w.status = 'running' AND w.generation = f.generation
	RETURNING w.id, w.status, f.step, f.status AS step_status, f.by_task
), cascade_targets AS MATERIALIZED (
	-- Locked first, so that the status each had is the one the cascade changes.
	SELECT t.id, t.status, e.step AS cause, e.step_status, e.by_task
	FROM ended_workflows e JOIN workflow_steps ws ON ws.workflow_id = e.id
	JOIN tasks t ON t.id = ws.task_id
	WHERE t.status IN ('blocked', 'pending', 'claimed', 'retry', 'executing')
		AND t.id NOT IN (SELECT id FROM ` + src + `)
	ORDER BY t.id
	FOR UPDATE OF t
), cascaded AS (
	UPDATE tasks t SET
		status = CASE WHEN t.status = 'executing' THEN 'executing' ELSE 'cancelled' END,
		cancel_requested = (t.status = 'executing'),
		finished_at = CASE WHEN t.status = 'executing' THEN t.finished_at ELSE now() END,
		last_error = 'workflow step ' || c.cause
			|| CASE WHEN c.step_status = 'dead' THEN ' died' ELSE ' was cancelled' END,
		updated_at = now()
	FROM cascade_targets c
	WHERE t.id = c.id
	RETURNING t.id, t.queue, t.step, t.attempts, t.workflow_id, c.status AS from_status, c.by_task
), step_effects AS (
	SELECT e.by_task AS effect_of,
		jsonb_build_object('workflow_ended', e.status, 'cascaded', coalesce(c.list, '[]'::jsonb)) AS effects
	FROM ended_workflows e
	LEFT JOIN (SELECT by_task, jsonb_agg(jsonb_build_object('id', id, 'queue', queue, 'step', step,
			'workflow_id', workflow_id, 'attempts', attempts, 'from_status', from_status) ORDER BY id) AS list
		FROM cascaded GROUP BY by_task) c ON c.by_task = e.by_task
)`
}

// effectsOf joins the step_effects of stepsDone or stepsEnded to the rows of src, as
// fx.effects: NULL for a row whose end changed nothing else (every plain task).
func effectsOf(src string) string {
	return `
LEFT JOIN step_effects fx ON fx.effect_of = ` + src + `.id`
}

const workflowColumns = `id, name, status, idempotency_key, fingerprint, created_at, finished_at`

// insertWorkflow creates a workflow; nothing is returned when its idempotency key is
// taken (ON CONFLICT waits for a concurrent holder, so identical concurrent
// submissions create one workflow).
const insertWorkflow = `INSERT INTO workflows (id, name, status, idempotency_key, fingerprint, steps_left)
VALUES ($1, $2, 'running', $3, $4, $5)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, created_at`

const workflowByIdempotencyKey = `SELECT id, fingerprint FROM workflows WHERE idempotency_key = $1`

// lockQueuesForWorkflow reads the named queues' default budgets, holding KEY SHARE as
// enqueueTasks does.
const lockQueuesForWorkflow = `SELECT name, max_retries FROM queues WHERE name = ANY($1::text[])
ORDER BY name FOR KEY SHARE`

// insertWorkflowTasks inserts the steps' tasks of workflow $1: blocked when $10 (the
// step has dependencies), else pending. $11: default budgets, per task; $12: the
// submission's trace context.
const insertWorkflowTasks = `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at,
	max_retries, timeout_seconds, workflow_id, step, traceparent)
SELECT i.id, i.queue, i.payload::jsonb, i.priority, CASE WHEN i.blocked THEN 'blocked' ELSE 'pending' END,
	coalesce(i.scheduled_at, now()), coalesce(i.max_retries, i.default_retries), i.timeout_seconds, $1, i.step, $12
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int[], $6::timestamptz[], $7::int[], $8::int[],
	$9::text[], $10::bool[], $11::int[])
	AS i(id, queue, payload, priority, scheduled_at, max_retries, timeout_seconds, step, blocked, default_retries)`

const insertWorkflowSteps = `INSERT INTO workflow_steps (workflow_id, step, ord, depends_on, task_id, waiting_on)
SELECT $1, i.step, i.ord, coalesce(string_to_array(i.deps, ','), '{}'), i.task_id,
	cardinality(coalesce(string_to_array(i.deps, ','), '{}'))
FROM unnest($2::text[], $3::int[], $4::text[], $5::uuid[]) AS i(step, ord, deps, task_id)`

const insertWorkflowEdges = `INSERT INTO workflow_edges (workflow_id, parent, child)
SELECT $1, e.parent, e.child FROM unnest($2::text[], $3::text[]) AS e(parent, child)`

const getWorkflow = `SELECT ` + workflowColumns + ` FROM workflows WHERE id = $1`

// workflowSteps: the steps of workflows $1 in the order submitted, each with its
// current task (absent when the task's queue was deleted).
const workflowSteps = `SELECT ws.workflow_id, ws.step, ws.depends_on, ws.task_id, t.queue, t.status,
	t.attempts, t.result, t.last_error
FROM workflow_steps ws LEFT JOIN tasks t ON t.id = ws.task_id
WHERE ws.workflow_id = ANY($1::uuid[])
ORDER BY ws.workflow_id, ws.ord`

// listWorkflows: newest first, keyset-paginated on (created_at, id); $1 NULL = any status.
const listWorkflows = `SELECT ` + workflowColumns + ` FROM workflows
WHERE ($1::text IS NULL OR status = $1)
	AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3::uuid))
ORDER BY created_at DESC, id DESC
LIMIT $4`

const lockWorkflow = `SELECT status, generation FROM workflows WHERE id = $1 FOR UPDATE`

// lockWorkflowTasks locks the current tasks of workflow $1's steps, in id order,
// and returns each step with its task's state.
const lockWorkflowTasks = `SELECT ws.step, ws.depends_on, t.id, t.queue, t.status
FROM workflow_steps ws JOIN tasks t ON t.id = ws.task_id
WHERE ws.workflow_id = $1
ORDER BY t.id
FOR UPDATE OF t`

// cancelWorkflowTasks cancels the unfinished current tasks of workflow $1 (executing
// ones get cancel_requested), returning each with the status it had.
const cancelWorkflowTasks = `WITH c AS (
	SELECT t.id, t.status FROM workflow_steps ws JOIN tasks t ON t.id = ws.task_id
	WHERE ws.workflow_id = $1 AND t.status IN ('blocked', 'pending', 'claimed', 'retry', 'executing')
	ORDER BY t.id
	FOR UPDATE OF t
)
UPDATE tasks t SET
	status = CASE WHEN c.status = 'executing' THEN 'executing' ELSE 'cancelled' END,
	cancel_requested = (c.status = 'executing'),
	finished_at = CASE WHEN c.status = 'executing' THEN t.finished_at ELSE now() END,
	last_error = 'workflow cancelled',
	updated_at = now()
FROM c WHERE t.id = c.id
RETURNING t.id, t.queue, t.attempts, c.status AS from_status, t.workflow_id, t.step`

// endWorkflow sets workflow $1's status to $2 and stamps finished_at.
const endWorkflow = `UPDATE workflows SET status = $2, finished_at = now(), updated_at = now() WHERE id = $1`

// resumeWorkflow makes workflow $1 run again with $2 steps not done.
const resumeWorkflow = `UPDATE workflows SET status = 'running', finished_at = NULL, steps_left = $2,
	generation = generation + 1, updated_at = now()
WHERE id = $1`

// recreateSteps gives each step $2 of workflow $1 a new task ($3) copied from its
// current one (replayed_from), blocked while $4 of its dependencies are not done;
// the dead task being replayed ($5, when among them) is marked replayed.
const recreateSteps = `WITH input AS (
	SELECT * FROM unnest($2::text[], $3::uuid[], $4::int[]) AS i(step, new_id, waiting)
), old AS (
	SELECT i.*, ws.task_id AS old_id FROM input i
	JOIN workflow_steps ws ON ws.workflow_id = $1 AND ws.step = i.step
), moved AS (
	UPDATE workflow_steps ws SET task_id = old.new_id, waiting_on = old.waiting
	FROM old WHERE ws.workflow_id = $1 AND ws.step = old.step
), marked AS (
	UPDATE tasks t SET replay_count = t.replay_count + 1, replayed_at = now(), updated_at = now()
	WHERE t.id = $5
)
INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries,
	timeout_seconds, replayed_from, schedule, workflow_id, step)
SELECT old.new_id, src.queue, src.payload, src.priority,
	CASE WHEN old.waiting > 0 THEN 'blocked' ELSE 'pending' END, now(), src.max_retries,
	src.timeout_seconds, src.id, src.schedule, $1, old.step
FROM old JOIN tasks src ON src.id = old.old_id
RETURNING ` + taskColumns

// failedWorkflowSteps: which of the dead tasks $1 are the current task of a step of
// a failed workflow.
const failedWorkflowSteps = `SELECT ws.task_id FROM workflow_steps ws
JOIN workflows w ON w.id = ws.workflow_id
WHERE ws.task_id = ANY($1::uuid[]) AND w.status = 'failed'`

// workflowOfDead: the workflow of dead task $1 when it is the current task of its
// step in a failed workflow.
const workflowOfDead = `SELECT ws.workflow_id FROM workflow_steps ws
JOIN workflows w ON w.id = ws.workflow_id
WHERE ws.task_id = $1 AND w.status = 'failed'`

// expiredWorkflows: up to $2 workflows that finished more than $1 ms ago and none
// of whose tasks is unfinished or dead (a failed workflow stays while its dead step
// may resume it), oldest first, locked.
const expiredWorkflows = `SELECT w.id FROM workflows w
WHERE w.status <> 'running' AND w.finished_at < now() - $1 * interval '1 millisecond'
	AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.workflow_id = w.id
		AND t.status NOT IN ('done', 'cancelled'))
ORDER BY w.finished_at
LIMIT $2
FOR UPDATE SKIP LOCKED`

// deleteWorkflowTasks deletes every task of workflows $1 (their attempts go by
// cascade), then the workflows (their steps and edges go by cascade).
const deleteWorkflows = `WITH gone AS (DELETE FROM tasks WHERE workflow_id = ANY($1::uuid[]))
DELETE FROM workflows WHERE id = ANY($1::uuid[])`

// pushQueues lists the queues with a push target (package push), by name.
const pushQueues = `SELECT ` + queueColumns + ` FROM queues WHERE push IS NOT NULL ORDER BY name`

// cancelRequestedAmong returns which of the executing tasks $1, each under its
// lease token $2, have a cancel requested: a pusher aborts their requests.
const cancelRequestedAmong = `SELECT t.id FROM tasks t
JOIN unnest($1::uuid[], $2::uuid[]) AS i(id, token) ON t.id = i.id AND t.lease_token = i.token
WHERE t.status = 'executing' AND t.cancel_requested`

// recentPushAnswers reads the last $2 finished attempts by pushers of each queue
// $1, newest first (attempts_finished_idx, read backwards per queue).
const recentPushAnswers = `SELECT q.name AS queue, a.task_id, a.attempt, a.status, a.finished_at, a.error
FROM unnest($1::text[]) AS q(name)
CROSS JOIN LATERAL (
	SELECT task_id, attempt, status, finished_at, error FROM attempts
	WHERE queue = q.name AND finished_at IS NOT NULL AND worker_id LIKE 'push:%'
	ORDER BY finished_at DESC LIMIT $2
) a
ORDER BY q.name, a.finished_at DESC`

// unsealedPushSecrets lists the push secrets not sealed with the current key ($1 the
// sealed text's prefix, as in unsealedTasks); there are few, so all at once.
const unsealedPushSecrets = `SELECT name, push_secret FROM queues
WHERE push_secret IS NOT NULL AND left(push_secret, length($1)) <> $1
ORDER BY name
FOR UPDATE SKIP LOCKED`

const resealPushSecret = `UPDATE queues SET push_secret = $2 WHERE name = $1`
