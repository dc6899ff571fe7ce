package storage

// LockQueueForEnqueue is the enqueue's queue-lock statement, for the plan tests.
const LockQueueForEnqueue = lockQueueForEnqueue
