-- name: delete_queue_tally
-- delete_queue_tally forgets the figures of a queue being deleted (or created afresh),
-- its groups' with them (migration 0025).
--
-- Parameters:
--   $1 text: the queue
-- Returns: no rows.
WITH gone AS (DELETE FROM queue_tally WHERE queue = $1),
	groups_gone AS (DELETE FROM group_tally WHERE queue = $1),
	group_deltas_gone AS (DELETE FROM group_tally_delta WHERE queue = $1)
DELETE FROM queue_tally_delta WHERE queue = $1
