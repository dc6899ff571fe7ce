-- 0009: a worker may report an attempt's progress with its heartbeats
-- (POST /workers/heartbeat with "progress"). The last report stays on the task after
-- the attempt ends, so an operator can see how far a failed or released attempt got;
-- the claim of the next attempt clears it. Sealed like results when encryption at rest
-- is on. A nullable column without a default: adding it rewrites no row.
ALTER TABLE tasks ADD COLUMN progress jsonb;
