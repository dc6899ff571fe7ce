-- name: heartbeat_tasks
-- heartbeat_tasks is heartbeat_task for a batch of ($1 ids, $2 tokens) held by worker
-- $3, in one statement, at time $5 (NULL: now()); it leaves progress alone. A lease is
-- extended when a row of its id holds its token: the row at its id's first position in
-- $1, else (an id given twice) any found by a scalar subquery; no join (statements.go).
--
-- Parameters:
--   $1 uuid[]: the id of each row
--   $2 uuid[]: the token of each row
--   $3 text: the worker holding the leases
--   $4 float8: the lease to grant, in milliseconds
--   $5 timestamptz: the time (NULL: now())
-- Returns: id, lease_expires_at, cancel_requested.
UPDATE tasks t SET
	lease_expires_at = least(coalesce($5::timestamptz, now()) + $4 * interval '1 millisecond', t.deadline_at),
	heartbeat_at = coalesce($5::timestamptz, now())
WHERE t.id = ANY($1::uuid[]) -- by primary key, no join (statements.go)
	AND (t.lease_token = ($2::uuid[])[array_position($1::uuid[], t.id)]
		-- an id given twice: any of its rows (evaluated only then)
		OR (SELECT true FROM unnest($1::uuid[], $2::uuid[]) AS h(id, token)
			WHERE h.id = t.id AND h.token = t.lease_token LIMIT 1))
	AND t.claimed_by = $3
	AND t.status || '' = 'executing' -- by primary key (statements.go)
	AND t.lease_expires_at > coalesce($5::timestamptz, now())
RETURNING t.id, t.lease_expires_at, t.cancel_requested
