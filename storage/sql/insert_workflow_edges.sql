-- name: insert_workflow_edges
--
-- Parameters:
--   $1 uuid: the workflow
--   $2 text[]: the parent of each row
--   $3 text[]: the child of each row
-- Returns: no rows.
INSERT INTO workflow_edges (workflow_id, parent, child)
SELECT $1, e.parent, e.child FROM unnest($2::text[], $3::text[]) AS e(parent, child)
