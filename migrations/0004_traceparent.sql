-- 0004: the W3C traceparent of the enqueue, so dispatch, claim, ack and the worker's
-- own spans join the producer's trace.
ALTER TABLE tasks ADD COLUMN traceparent text;
