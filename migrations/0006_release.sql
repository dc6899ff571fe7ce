-- 0006: a worker that stops gracefully releases the tasks it cannot finish
-- (POST /workers/release). A released attempt is recorded as 'released' and does not
-- count against the task's retry budget: the budget is attempts - releases.
ALTER TABLE tasks ADD COLUMN releases integer NOT NULL DEFAULT 0;

-- The new status list is a superset of the old one, so every existing row already
-- satisfies it: NOT VALID skips a scan of the whole attempts table under this
-- migration's lock, and new and updated rows are checked all the same.
ALTER TABLE attempts DROP CONSTRAINT attempts_status_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_status_check CHECK (status IN
    ('executing', 'succeeded', 'failed', 'abandoned', 'timed_out', 'cancelled', 'released')) NOT VALID;
