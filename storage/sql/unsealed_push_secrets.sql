-- name: unsealed_push_secrets
-- unsealed_push_secrets lists the push secrets not sealed with the current key ($1 the
-- sealed text's prefix, as in unsealed_tasks); there are few, so all at once.
--
-- Parameters:
--   $1 text: the sealed prefix of the current key
-- Returns: name, push_secret.
SELECT name, push_secret FROM queues
WHERE push_secret IS NOT NULL AND left(push_secret, length($1)) <> $1
ORDER BY name
FOR UPDATE SKIP LOCKED
