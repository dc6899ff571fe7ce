-- name: lock_active_admins
-- lock_active_admins locks the admin tokens that still work, so that two concurrent
-- revocations cannot both remove "the other" last admin.
--
-- Parameters: none.
-- Returns: id.
SELECT id FROM api_tokens
WHERE role = 'admin' AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
ORDER BY id
FOR UPDATE
