-- 0011: workflows, DAGs of tasks. A workflow's steps are tasks (tasks.workflow_id,
-- tasks.step); workflow_steps maps each step to its current task (a resumed step gets
-- a new task) and counts its dependencies not yet done; workflow_edges lists, per
-- step, the steps that depend on it, so that an ack finds the dependents of the step
-- it finished through the primary key. Every statement that ends a step's task
-- (storage/queries.go: ackTasks, nackTask, releaseTask, reclaimExpired, cancelTask and
-- the bulk cancels) unblocks, cascades and finishes workflows in the same statement.

CREATE TABLE workflows (
    id              uuid        PRIMARY KEY,
    name            text        CHECK (length(name) <= 200),
    status          text        NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
    idempotency_key text,
    fingerprint     bytea,
    -- Steps whose current task is not done: the ack that brings it to 0 ends the
    -- workflow succeeded. A counter on the row, not a count of tasks, so that two
    -- concurrent acks of the last two steps cannot both see the other as unfinished.
    steps_left      integer     NOT NULL CHECK (steps_left >= 0),
    -- Bumped by every resume. A transition statement that read the workflow before a
    -- resume committed (its snapshot is older) must not count a step of the old run
    -- in the new one: its updates of the workflow say "AND generation = what I read".
    generation      integer     NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
-- insertWorkflow: reserves an idempotency key.
CREATE UNIQUE INDEX workflows_idempotency_idx ON workflows (idempotency_key) WHERE idempotency_key IS NOT NULL;
-- listWorkflows: newest first, keyset-paginated, with or without a status filter.
CREATE INDEX workflows_list_idx ON workflows (created_at DESC, id DESC);
CREATE INDEX workflows_status_list_idx ON workflows (status, created_at DESC, id DESC);
-- expiredWorkflows (retention): finished workflows, oldest first.
CREATE INDEX workflows_finished_idx ON workflows (finished_at) WHERE status <> 'running';

CREATE TABLE workflow_steps (
    workflow_id uuid    NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    step        text    NOT NULL CHECK (step ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'),
    ord         integer NOT NULL, -- position in the submitted list
    depends_on  text[]  NOT NULL,
    -- The step's current task; a resume gives a step a new one.
    task_id     uuid    NOT NULL,
    -- Dependencies whose current task is not done; the step's task is blocked until 0.
    waiting_on  integer NOT NULL CHECK (waiting_on >= 0),
    PRIMARY KEY (workflow_id, step)
);
-- Every transition statement: is this task the current task of a workflow step?
CREATE UNIQUE INDEX workflow_steps_task_idx ON workflow_steps (task_id);

CREATE TABLE workflow_edges (
    workflow_id uuid NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    parent      text NOT NULL,
    child       text NOT NULL,
    PRIMARY KEY (workflow_id, parent, child) -- ackTasks: the dependents of a done step
);

ALTER TABLE tasks ADD COLUMN workflow_id uuid, ADD COLUMN step text;
-- getWorkflow and retention: a workflow's tasks, the replaced ones included.
CREATE INDEX tasks_workflow_idx ON tasks (workflow_id) WHERE workflow_id IS NOT NULL;

-- The new status 'blocked': a step waiting for its dependencies, never dispatched
-- (no dispatch statement reads it), counted in its queue's depth by 0008's triggers,
-- which count whatever statuses exist. The list only grows, so NOT VALID (no scan).
ALTER TABLE tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check CHECK (status IN
    ('pending', 'blocked', 'claimed', 'executing', 'retry', 'done', 'dead', 'cancelled')) NOT VALID;
