-- 0010: schedules (cron). Each row fires one task per tick into its queue; the
-- scheduler (package scheduler) claims due rows with FOR UPDATE SKIP LOCKED and, in
-- one transaction per schedule, inserts the tick's task and advances next_run_at.

CREATE TABLE schedules (
    name            text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'),
    -- No cascade: DeleteQueue refuses (queue_not_empty) while a schedule targets the queue.
    queue           text        NOT NULL REFERENCES queues (name),
    cron            text        NOT NULL,
    timezone        text        NOT NULL DEFAULT 'UTC',
    -- Sealed (bound to the schedule's name) when encryption at rest is on.
    payload         jsonb       NOT NULL,
    priority        smallint    NOT NULL DEFAULT 5 CHECK (priority BETWEEN 1 AND 10),
    max_retries     integer     CHECK (max_retries BETWEEN 0 AND 100), -- NULL: the queue's default
    timeout_seconds integer     CHECK (timeout_seconds > 0),
    paused          boolean     NOT NULL DEFAULT false,
    -- The next tick to fire; NULL while paused or when the expression fires no more.
    next_run_at     timestamptz,
    last_run_at     timestamptz,
    last_task_id    uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- claimDueSchedule and nextScheduleIn: unpaused schedules by next tick.
CREATE INDEX schedules_due_idx ON schedules (next_run_at) WHERE NOT paused AND next_run_at IS NOT NULL;
-- listSchedules with a queue filter, and schedulesOfQueue (DeleteQueue).
CREATE INDEX schedules_queue_idx ON schedules (queue, name);

-- The schedule whose tick created the task (NULL for tasks enqueued directly).
ALTER TABLE tasks ADD COLUMN schedule text;
