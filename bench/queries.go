package bench

// Every SQL statement the harness runs. It only reads TaskForge's tables (every
// change goes through the HTTP API); task ids are passed as text[] and cast.

// countTerminal counts a queue's tasks that reached a final state.
const countTerminal = `SELECT count(*) FROM tasks WHERE queue = $1 AND status IN ('done', 'dead', 'cancelled')`

// countExecuting counts a queue's tasks that a worker holds.
const countExecuting = `SELECT count(*) FROM tasks WHERE queue = $1 AND status = 'executing'`

// registeredWorkers counts the given workers that have polled at least once.
const registeredWorkers = `SELECT count(*) FROM workers WHERE id = ANY($1::text[])`

// drainWindow bounds the given tasks' attempts and counts those that ended done.
const drainWindow = `SELECT
	(SELECT count(*) FROM tasks WHERE id = ANY($1::text[]::uuid[]) AND status = 'done'),
	min(a.started_at), max(a.finished_at)
FROM attempts a WHERE a.task_id = ANY($1::text[]::uuid[])`

// receiptLatencies: per task, enqueue → first attempt's start and → its finish, in ms.
const receiptLatencies = `SELECT
	extract(epoch FROM a.started_at - t.created_at)::float8 * 1000,
	coalesce(extract(epoch FROM a.finished_at - t.created_at)::float8 * 1000, 'NaN'),
	t.status = 'done'
FROM tasks t JOIN attempts a ON a.task_id = t.id AND a.attempt = 1
WHERE t.id = ANY($1::text[]::uuid[])`

// taskHistories: per task, its status and its attempts' statuses in order, with the
// lag between attempt 1's end and attempt 2's start (ms, NaN when either is missing).
const taskHistories = `SELECT t.id::text, t.status,
	coalesce(array_agg(a.status ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL), '{}'),
	coalesce(extract(epoch FROM
		max(a.started_at) FILTER (WHERE a.attempt = 2) - max(a.finished_at) FILTER (WHERE a.attempt = 1)
	)::float8 * 1000, 'NaN')
FROM tasks t LEFT JOIN attempts a ON a.task_id = t.id
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
FROM tasks t
JOIN attempts a1 ON a1.task_id = t.id AND a1.attempt = 1
LEFT JOIN attempts a2 ON a2.task_id = t.id AND a2.attempt = 2
WHERE t.id = ANY($1::text[]::uuid[])`

// serverInfo is the server's version and whether the role may create databases.
const serverInfo = `SELECT version(),
	(SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user)`
