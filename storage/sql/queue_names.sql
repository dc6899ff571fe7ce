-- name: queue_names
-- queue_names lists every queue's name, in order.
--
-- Parameters: none.
-- Returns: name.
SELECT name FROM queues ORDER BY name
