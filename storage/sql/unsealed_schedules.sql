-- name: unsealed_schedules
-- unsealed_schedules lists the schedules whose payload is not sealed with the current
-- key ($1 the sealed prefix, as in unsealed_tasks); there are few, so all at once.
--
-- Parameters:
--   $1 text: the sealed prefix of the current key ("v1.<key id>.")
-- Returns: name, payload.
SELECT name, payload FROM schedules
WHERE left(coalesce(payload->>'taskforge_sealed', ''), length($1)) <> $1
ORDER BY name
FOR UPDATE SKIP LOCKED
