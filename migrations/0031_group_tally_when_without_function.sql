-- 0031: the group counts' row triggers test the hot-path setting in their WHEN
-- themselves, not through group_tally_written_inline().
--
-- PostgreSQL compiles a trigger's WHEN once per statement that may fire it (for a
-- claim, tasks_group_tally_update; for an ack, tasks_group_tally_delete), and
-- compiling inlines the SQL functions it calls: it parses and analyses the body of
-- group_tally_written_inline (0028) again, in every claim and every ack, whether or
-- not the task has a group. The expression itself, written out, costs no parse.
-- What each trigger does is unchanged.

DROP TRIGGER tasks_group_tally_insert ON tasks;
DROP TRIGGER tasks_group_tally_update ON tasks;
DROP TRIGGER tasks_group_tally_delete ON tasks;

CREATE TRIGGER tasks_group_tally_insert AFTER INSERT ON tasks FOR EACH ROW
    WHEN (NEW.group_key IS NOT NULL
        AND coalesce(current_setting('taskforge.group_tally', true) <> 'inline', true))
    EXECUTE FUNCTION group_tally_changed();
CREATE TRIGGER tasks_group_tally_update AFTER UPDATE OF status, group_key ON tasks FOR EACH ROW
    WHEN ((OLD.group_key IS NOT NULL OR NEW.group_key IS NOT NULL)
        AND (OLD.group_key IS DISTINCT FROM NEW.group_key
            OR (OLD.status IS DISTINCT FROM NEW.status
                AND coalesce(current_setting('taskforge.group_tally', true) <> 'inline', true))))
    EXECUTE FUNCTION group_tally_changed();
CREATE TRIGGER tasks_group_tally_delete AFTER DELETE ON tasks FOR EACH ROW
    WHEN (OLD.group_key IS NOT NULL
        AND coalesce(current_setting('taskforge.group_tally', true) <> 'inline', true))
    EXECUTE FUNCTION group_tally_changed();
