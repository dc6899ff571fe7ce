-- name: next_due
-- next_due is how many seconds until the earliest waiting task due after $1 (the
-- database clock of the dispatcher's last timed pass) becomes due: negative when it is
-- due already, NULL when none waits. One probe of tasks_due_at_idx (the tasks written
-- to wait: scheduled ahead or backing off), whatever the number of queues or of due
-- tasks. A paused queue's task may answer; the pass it wakes then finds nothing to
-- move, and looks past it next time.
--
-- Parameters:
--   $1 timestamptz: the database clock of the dispatcher's last timed pass
-- Returns: extract.
SELECT extract(epoch FROM min(scheduled_at) - now())::float8 FROM tasks
WHERE status IN ('pending', 'retry') AND scheduled_at > updated_at AND scheduled_at > $1
