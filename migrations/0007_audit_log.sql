-- 0007: the audit log of operator actions (package audit): who changed a queue,
-- cancelled a task, replayed or discarded dead tasks, or minted or revoked a token,
-- when, from where, with what request, and how it ended. Rows are written after the
-- action and deleted by the janitor after TASKFORGE_AUDIT_RETENTION.
CREATE TABLE audit_log (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- listAudit pages by id
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,  -- the token's name, or 'anonymous' on an open API
    token_id    uuid,                  -- NULL on an open API
    via         text        NOT NULL CHECK (via IN ('token', 'session', 'open')),
    remote_addr text        NOT NULL,
    method      text        NOT NULL,
    route       text        NOT NULL,  -- the route pattern, e.g. /queues/:name
    queue       text,                  -- the :name of the route, if any
    target      text,                  -- the :id of the route, if any
    status      integer     NOT NULL,  -- the HTTP status answered
    request     jsonb                  -- the request body, when JSON of at most 4 KiB
);
-- listAudit with a queue filter.
CREATE INDEX audit_log_queue_idx ON audit_log (queue, id DESC) WHERE queue IS NOT NULL;
