-- 0002: optional priority aging per queue. When set, each priority level is worth
-- this many milliseconds of waiting, so an old low-priority task is eventually served
-- before a stream of new high-priority ones. NULL keeps strict priority.
ALTER TABLE queues ADD COLUMN priority_aging_ms bigint CHECK (priority_aging_ms > 0);
