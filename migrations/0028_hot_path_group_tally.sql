-- 0028: the hot path's statements write their group counts' deltas themselves.
--
-- 0025 counts a named group's tasks with row triggers: one PL/pgSQL call and one
-- appended group_tally_delta row per change of a task's status, on every statement.
-- On a fair queue whose tasks all name a group, that was PostgreSQL's whole extra cost
-- per task against a plain queue (E1: about 50 µs a task, 156-178 against 108-124):
-- enqueue 1 row, dispatch 2, claim 2, ack 1. The statements of a task's hot path that
-- already append their queue deltas inline (0013: enqueue_tasks, enqueue_task_refs,
-- enqueue_debounced, claim_tasks, ack_plain_tasks, ack_plain_task_refs) now also append
-- their group deltas, aggregated: one row per (queue, group, status) per statement,
-- whatever the number of tasks (a poll's claim of 16 tasks of one group: 2 rows, not
-- 32; a preload of 1,000: 1 row, not 1,000). A fair queue's dispatch
-- (dispatch_due_grouped) joins them: it now runs on the hot-path pool and appends
-- both its queue and its group deltas.
--
-- They do so on a connection whose session sets taskforge.group_tally = 'inline'
-- (storage.HotPathSettings sets it beside 0013's taskforge.tally), and on those the
-- row triggers below stand aside; on every other connection the statements' group CTEs
-- write nothing and the triggers count as before. A separate setting rather than
-- 0013's, so that a replica of the previous release, whose hot-path connections set
-- taskforge.tally only and whose statements write no group delta, is still counted by
-- the triggers during a rolling upgrade (and after a downgrade).
--
-- Which changes stand aside on such a connection: every insert (only the enqueues
-- insert tasks there), every delete (only the plain ack deletes tasks there: it moves
-- the task into history itself, 0023) and every update that changes a task's status
-- (only the claim and the fair dispatch). An update that changes a task's group still fires the trigger on
-- any connection: enqueue_debounced's replacement of the waiting task may move it to
-- another group, and the statement cannot see the old group (RETURNING shows the new
-- row only), so the trigger counts that move (its status is pending before and after).
-- No hot-path statement changes both a task's status and its group.
--
-- WHEN evaluates its conditions in order: a task of the unnamed group still costs no
-- function call; a named group's pays one current_setting() (the SQL function is
-- inlined) rather than a PL/pgSQL call and an insert.

-- group_tally_written_inline: does this session's hot path append its own group deltas?
CREATE FUNCTION group_tally_written_inline() RETURNS boolean LANGUAGE sql STABLE
    AS $$ SELECT coalesce(current_setting('taskforge.group_tally', true) = 'inline', false) $$;

DROP TRIGGER tasks_group_tally_insert ON tasks;
DROP TRIGGER tasks_group_tally_update ON tasks;
DROP TRIGGER tasks_group_tally_delete ON tasks;

CREATE TRIGGER tasks_group_tally_insert AFTER INSERT ON tasks FOR EACH ROW
    WHEN (NEW.group_key IS NOT NULL AND NOT group_tally_written_inline())
    EXECUTE FUNCTION group_tally_changed();
CREATE TRIGGER tasks_group_tally_update AFTER UPDATE OF status, group_key ON tasks FOR EACH ROW
    WHEN ((OLD.group_key IS NOT NULL OR NEW.group_key IS NOT NULL)
        AND (OLD.group_key IS DISTINCT FROM NEW.group_key
            OR (OLD.status IS DISTINCT FROM NEW.status AND NOT group_tally_written_inline())))
    EXECUTE FUNCTION group_tally_changed();
CREATE TRIGGER tasks_group_tally_delete AFTER DELETE ON tasks FOR EACH ROW
    WHEN (OLD.group_key IS NOT NULL AND NOT group_tally_written_inline())
    EXECUTE FUNCTION group_tally_changed();
