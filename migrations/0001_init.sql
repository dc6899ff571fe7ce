-- 0001: queues, tasks, attempts, workers.
-- Every index below names the query in storage/queries.go that it serves.

CREATE TABLE queues (
    name            text        PRIMARY KEY,
    max_retries     integer     NOT NULL DEFAULT 3 CHECK (max_retries BETWEEN 0 AND 100),
    rate_limit      double precision CHECK (rate_limit > 0),
    rate_burst      integer     CHECK (rate_burst >= 1),
    max_concurrency integer     CHECK (max_concurrency >= 1),
    backoff_base_ms bigint      NOT NULL DEFAULT 1000 CHECK (backoff_base_ms >= 0),
    backoff_max_ms  bigint      NOT NULL DEFAULT 3600000 CHECK (backoff_max_ms >= 0),
    paused          boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tasks (
    id               uuid        PRIMARY KEY,
    queue            text        NOT NULL REFERENCES queues (name) ON DELETE CASCADE,
    payload          jsonb       NOT NULL,
    priority         smallint    NOT NULL CHECK (priority BETWEEN 1 AND 10),
    status           text        NOT NULL CHECK (status IN
                         ('pending', 'claimed', 'executing', 'retry', 'done', 'dead', 'cancelled')),
    -- When the task becomes (or became) eligible to run: the requested schedule, or the end
    -- of its retry backoff.
    scheduled_at     timestamptz NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    max_retries      integer     NOT NULL CHECK (max_retries BETWEEN 0 AND 100),
    timeout_seconds  integer     CHECK (timeout_seconds > 0),
    idempotency_key  text,
    fingerprint      bytea,
    last_error       text,
    result           jsonb,
    claimed_by       text,
    -- Unique per claim and never reused; ack, nack and heartbeat must present it.
    lease_token      uuid,
    lease_expires_at timestamptz,
    heartbeat_at     timestamptz,
    -- Start of the current attempt plus timeout_seconds; leases never extend past it.
    deadline_at      timestamptz,
    dispatched_at    timestamptz,
    cancel_requested boolean     NOT NULL DEFAULT false,
    replayed_from    uuid,
    replay_count     integer     NOT NULL DEFAULT 0,
    replayed_at      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
) WITH (fillfactor = 80); -- room for HOT updates: a task row is updated four or more times

-- dispatchDue: due pending/retry tasks of one queue in priority, then eligible-time order.
CREATE INDEX tasks_dispatch_idx ON tasks (queue, priority, scheduled_at)
    WHERE status IN ('pending', 'retry');
-- reclaimExpired and nextLeaseExpiry: executing tasks by lease expiry.
CREATE INDEX tasks_lease_idx ON tasks (lease_expires_at) WHERE status = 'executing';
-- listClaimed (buffer repair): tasks the dispatcher mirrored into Redis.
CREATE INDEX tasks_claimed_idx ON tasks (queue, dispatched_at) WHERE status = 'claimed';
-- listTasks: a queue's tasks newest first, keyset-paginated; also serves queueStats' depth count.
CREATE INDEX tasks_list_idx ON tasks (queue, created_at DESC, id DESC);
-- listTasks with a status filter, and queueStats' per-status counts.
CREATE INDEX tasks_status_list_idx ON tasks (queue, status, created_at DESC, id DESC);
-- listDead: a queue's dead-letter list, most recently died first.
CREATE INDEX tasks_dead_idx ON tasks (queue, finished_at DESC, id DESC) WHERE status = 'dead';
-- insertTasks: reserves an idempotency key within its queue.
CREATE UNIQUE INDEX tasks_idempotency_idx ON tasks (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- listWorkers: current_tasks per worker.
CREATE INDEX tasks_worker_idx ON tasks (claimed_by) WHERE status = 'executing';

CREATE TABLE attempts (
    task_id     uuid        NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt     integer     NOT NULL,
    queue       text        NOT NULL,
    worker_id   text        NOT NULL,
    lease_token uuid        NOT NULL,
    status      text        NOT NULL CHECK (status IN
                    ('executing', 'succeeded', 'failed', 'abandoned', 'timed_out', 'cancelled')),
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    error       text,
    PRIMARY KEY (task_id, attempt) -- taskAttempts: a task's history in order
);
-- queueStats: throughput and error rate over recent finished attempts.
CREATE INDEX attempts_finished_idx ON attempts (queue, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE workers (
    id                text        PRIMARY KEY,
    queues            text[]      NOT NULL DEFAULT '{}',
    first_seen_at     timestamptz NOT NULL DEFAULT now(),
    last_heartbeat_at timestamptz NOT NULL DEFAULT now()
);
