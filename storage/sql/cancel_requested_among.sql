-- name: cancel_requested_among
-- cancel_requested_among returns which of the executing tasks $1, each under its lease
-- token $2, have a cancel requested: a pusher aborts their requests.
--
-- Parameters:
--   $1 uuid[]: the id of each row
--   $2 uuid[]: the token of each row
-- Returns: id.
SELECT t.id FROM tasks t
JOIN unnest($1::uuid[], $2::uuid[]) AS i(id, token) ON t.id = i.id AND t.lease_token = i.token
WHERE t.status = 'executing' AND t.cancel_requested
