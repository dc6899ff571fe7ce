package storage

// EnqueueTasks is the enqueue's statement, for the plan tests.
const EnqueueTasks = enqueueTasks
