-- 0011: push delivery. A queue with a push target POSTs its tasks to an HTTP
-- endpoint (package push) instead of waiting for polling workers.

-- push: NULL for a pull queue (the default), else the target as the API shows it:
-- {"url", "timeout_ms", "headers", "secret_set"}.
ALTER TABLE queues ADD COLUMN push jsonb
    CHECK (push IS NULL OR (jsonb_typeof(push) = 'object' AND push ? 'url'));
-- The target's signing secret, write-only through the API; sealed (bound to the
-- queue's name) when encryption at rest is on. NULL: requests are not signed.
ALTER TABLE queues ADD COLUMN push_secret text
    CHECK (push_secret IS NULL OR push IS NOT NULL);

-- pushQueues: every replica's pushers re-read the push queues each second, so the
-- read costs the number of push queues, not of queues.
CREATE INDEX queues_push_idx ON queues (name) WHERE push IS NOT NULL;
