-- 0003: when the current (or last) attempt started, on the task row, so finishing an
-- attempt can report its duration without reading the attempts table.
ALTER TABLE tasks ADD COLUMN attempt_started_at timestamptz;
