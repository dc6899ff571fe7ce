package bench

// Every SQL statement the harness runs. It only reads TaskForge's tables (every
// change goes through the HTTP API); what may read a finished task or attempt reads
// the views of live and history rows together (all_tasks, all_attempts), except for the scale experiment's bulk loads
// below (harness-only SQL: no TaskForge code runs it); task ids are passed as
// text[] and cast.

// countTerminal counts a queue's tasks that reached a final state.
const countTerminal = `SELECT count(*) FROM all_tasks WHERE queue = $1 AND status IN ('done', 'dead', 'cancelled')`

// countTerminalTally is countTerminal read from the tally TaskForge keeps of every
// queue's tasks by status (its totals, plus the deltas not folded into them yet):
// a few rows, however many tasks the queue holds. The harness polls it while a
// drain runs, so that its polling takes no measurable CPU from the system it
// measures, as countTerminal, a count over the queue's rows, would. The deltas are
// written in the same transactions as the tasks, so both counts agree at every
// snapshot; waitTerminal checks that they do.
const countTerminalTally = `SELECT coalesce(sum(c.n), 0)::bigint FROM (
	SELECT n FROM queue_tally
	WHERE queue = $1 AND bucket = '-infinity' AND metric IN ('done', 'dead', 'cancelled')
	UNION ALL
	SELECT delta FROM queue_tally_delta
	WHERE queue = $1 AND bucket = '-infinity' AND metric IN ('done', 'dead', 'cancelled')
) c`

// countQueueTasks counts a queue's tasks, whatever their status.
const countQueueTasks = `SELECT count(*) FROM all_tasks WHERE queue = $1`

// countExecuting counts a queue's tasks that a worker holds.
const countExecuting = `SELECT count(*) FROM tasks WHERE queue = $1 AND status = 'executing'`

// registeredWorkers counts the given workers that have polled at least once.
const registeredWorkers = `SELECT count(*) FROM workers WHERE id = ANY($1::text[])`

// drainWindow bounds the given tasks' attempts and counts those that ended done.
const drainWindow = `SELECT
	(SELECT count(*) FROM all_tasks WHERE id = ANY($1::text[]::uuid[]) AND status = 'done'),
	min(a.started_at), max(a.finished_at)
FROM all_attempts a WHERE a.task_id = ANY($1::text[]::uuid[])`

// receiptLatencies: per task, enqueue → first attempt's start and → its finish, in ms.
const receiptLatencies = `SELECT
	extract(epoch FROM a.started_at - t.created_at)::float8 * 1000,
	coalesce(extract(epoch FROM a.finished_at - t.created_at)::float8 * 1000, 'NaN'),
	t.status = 'done'
FROM all_tasks t JOIN all_attempts a ON a.task_id = t.id AND a.attempt = 1
WHERE t.id = ANY($1::text[]::uuid[])`

// taskHistories: per task, its status and its attempts' statuses in order, with the
// lag between attempt 1's end and attempt 2's start (ms, NaN when either is missing).
const taskHistories = `SELECT t.id::text, t.status,
	coalesce(array_agg(a.status ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL), '{}'),
	coalesce(extract(epoch FROM
		max(a.started_at) FILTER (WHERE a.attempt = 2) - max(a.finished_at) FILTER (WHERE a.attempt = 1)
	)::float8 * 1000, 'NaN')
FROM all_tasks t LEFT JOIN all_attempts a ON a.task_id = t.id
WHERE t.id = ANY($1::text[]::uuid[])
GROUP BY t.id, t.status`

// heldLeases lists the executing tasks of the given workers with their leases.
const heldLeases = `SELECT id::text, attempts, lease_expires_at, heartbeat_at FROM tasks
WHERE queue = $1 AND status = 'executing' AND claimed_by = ANY($2::text[])`

// dbNow is the database clock.
const dbNow = `SELECT clock_timestamp()`

// recoveryTimes: per task, attempt 1's status, worker and end, and attempt 2's status
// and start.
const recoveryTimes = `SELECT t.id::text, t.status,
	a1.status, a1.finished_at,
	coalesce(a2.status, ''), a2.started_at
FROM all_tasks t
JOIN all_attempts a1 ON a1.task_id = t.id AND a1.attempt = 1
LEFT JOIN all_attempts a2 ON a2.task_id = t.id AND a2.attempt = 2
WHERE t.id = ANY($1::text[]::uuid[])`

// settingValues are the values of the settings named in $1, as SHOW gives them.
const settingValues = `SELECT name, current_setting(name) FROM unnest($1::text[]) AS name`

// serverInfo is the server's version and whether the role may create databases.
const serverInfo = `SELECT version(),
	(SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user)`

// The scale experiment's bulk loads: harness-only SQL, run on a freshly migrated
// database before its serve starts, through plain INSERTs so that every trigger
// on the tables fires as it would for the API's own inserts. Rows take the
// columns' defaults where the API's inserts do (attempts, releases, flags) and the
// values an enqueue without options gets: status pending, priority 5, the queue's
// max_retries, a small JSON payload, a version 7 UUID (the API's kind of id)
// built from the row's creation time.

// scaleInsertQueues creates queues $1-000000 … $1-<$2 − 1>, with the table's
// defaults (the API's defaults for a queue created with no settings).
const scaleInsertQueues = `INSERT INTO queues (name)
SELECT $1 || '-' || lpad(g::text, 6, '0') FROM generate_series(0, $2::int - 1) AS g`

// scaleUUIDv7 is a version 7 UUID of time ts: its first 48 bits the Unix time in
// ms, the version nibble 7, the rest gen_random_uuid's random bits.
const scaleUUIDv7 = `encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
	placing substring(int8send((extract(epoch FROM ts) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
	52, 1), 53, 1), 'hex')::uuid`

// scaleInsertFutureTasks gives every queue one pending task due an hour from now.
const scaleInsertFutureTasks = `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at,
	max_retries, created_at, updated_at)
SELECT ` + scaleUUIDv7 + `, q.name, '{"scale": "future"}'::jsonb, 5, 'pending', ts + interval '1 hour',
	q.max_retries, ts, ts
FROM queues q, LATERAL (SELECT now() AS ts) AS t`

// scaleInsertQueue creates one queue with the table's defaults.
const scaleInsertQueue = `INSERT INTO queues (name) VALUES ($1)`

// scaleInsertRows inserts rows $2 … $3 of queue $1's bulk load: pending tasks
// due now, created one microsecond apart ending before $4 (the load's start on
// the database clock), as if enqueued one by one.
const scaleInsertRows = `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at,
	max_retries, created_at, updated_at)
SELECT ` + scaleUUIDv7 + `, $1, jsonb_build_object('i', g), 5, 'pending', ts,
	(SELECT max_retries FROM queues WHERE name = $1), ts, ts
FROM generate_series($2::bigint, $3::bigint) AS g,
	LATERAL (SELECT $4::timestamptz - ($5::bigint - g) * interval '1 microsecond' AS ts) AS t`

// scaleCountTasks counts the tasks of the step's database.
const scaleCountTasks = `SELECT count(*) FROM all_tasks`

// The fair experiment's statements (the bulk loads are harness-only SQL, as the
// scale experiment's).

// fairInsertQueue creates a fair queue ($1) with the table's other defaults.
const fairInsertQueue = `INSERT INTO queues (name, fairness) VALUES ($1, 'round_robin')`

// fairInsertRows is scaleInsertRows with each row in group g<row mod $6>.
const fairInsertRows = `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at,
	max_retries, created_at, updated_at, group_key)
SELECT ` + scaleUUIDv7 + `, $1, jsonb_build_object('i', g), 5, 'pending', ts,
	(SELECT max_retries FROM queues WHERE name = $1), ts, ts, 'g' || (g % $6::bigint)
FROM generate_series($2::bigint, $3::bigint) AS g,
	LATERAL (SELECT $4::timestamptz - ($5::bigint - g) * interval '1 microsecond' AS ts) AS t`

// fairStartedOf counts the given tasks that have started an attempt.
const fairStartedOf = `SELECT count(DISTINCT task_id) FROM all_attempts WHERE task_id = ANY($1::text[]::uuid[])`

// fairLastStart is the latest first start of the given tasks.
const fairLastStart = `SELECT max(started_at) FROM all_attempts WHERE task_id = ANY($1::text[]::uuid[]) AND attempt = 1`

// fairHandouts counts queue $1's attempts started in ($2, $3].
const fairHandouts = `SELECT count(*) FROM all_attempts WHERE queue = $1 AND started_at > $2 AND started_at <= $3`

// fairBigTurns: per group of the given tasks ($1), the attempts of queue $2's group
// $3 started between the group's enqueue and its last first start.
const fairBigTurns = `WITH g AS (
	SELECT t.group_key, min(t.created_at) AS stored, max(a.started_at) AS last
	FROM all_tasks t JOIN all_attempts a ON a.task_id = t.id AND a.attempt = 1
	WHERE t.id = ANY($1::text[]::uuid[])
	GROUP BY t.group_key)
SELECT (SELECT count(*) FROM all_attempts a JOIN all_tasks t ON t.id = a.task_id
	WHERE a.queue = $2 AND t.group_key = $3 AND a.started_at > g.stored AND a.started_at <= g.last)::float8
FROM g`

// fairSmallSteps: per task of $1, its group, its place in its group by start (1 =
// its first to start), its enqueue (created_at), buffering (dispatched_at, NULL when
// the dispatcher never buffered it) and first start.
const fairSmallSteps = `SELECT t.group_key,
	row_number() OVER (PARTITION BY t.group_key ORDER BY a.started_at, t.id)::int,
	t.created_at, t.dispatched_at, a.started_at
FROM all_tasks t JOIN all_attempts a ON a.task_id = t.id AND a.attempt = 1
WHERE t.id = ANY($1::text[]::uuid[])`

// fairClaimGaps: the gaps, in ms, between the consecutive distinct starts of queue
// $1's attempts in ($2, $3]: a claim statement gives every attempt it starts its
// transaction's time, so these are the spacing of the claims' commits.
const fairClaimGaps = `SELECT extract(epoch FROM s - lag(s) OVER (ORDER BY s))::float8 * 1000
FROM (SELECT DISTINCT started_at AS s FROM all_attempts WHERE queue = $1 AND started_at > $2 AND started_at <= $3) d
OFFSET 1`

// fairSettling is what the spread part waits on before its idle window: the count
// deltas not folded yet, and queue $1's buffered tasks.
const fairSettling = `SELECT (SELECT count(*) FROM queue_tally_delta) + (SELECT count(*) FROM group_tally_delta),
	(SELECT count(*) FROM tasks WHERE queue = $1 AND status = 'claimed')`

// fairBufferedLatencies: per task of $1 that was buffered, enqueue → buffered, in ms.
const fairBufferedLatencies = `SELECT extract(epoch FROM dispatched_at - created_at)::float8 * 1000
FROM all_tasks WHERE id = ANY($1::text[]::uuid[]) AND dispatched_at IS NOT NULL`

// fairDrainWaits: per first attempt of queue $1's tasks but $3, from $2 (the
// workers' start) to its start, in ms.
const fairDrainWaits = `SELECT extract(epoch FROM started_at - $2::timestamptz)::float8 * 1000
FROM all_attempts WHERE queue = $1 AND attempt = 1 AND NOT task_id = ANY($3::text[]::uuid[])`

// fairDrainWindow bounds queue $1's succeeded attempts and counts them.
const fairDrainWindow = `SELECT count(*), min(started_at), max(finished_at) FROM all_attempts WHERE queue = $1 AND status = 'succeeded'`
