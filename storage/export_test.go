package storage

// EnqueueTasks is the enqueue's statement, for the plan tests.
var EnqueueTasks = enqueueTasks

// ByIDStatements are the statements that take tasks by id, for the plan tests.
var ByIDStatements = map[string]string{
	"claim":           claimTasks,
	"heartbeat":       heartbeatTask,
	"heartbeat batch": heartbeatTasks,
	"ack":             ackTasks,
	"ack plain":       ackPlainTasks,
	"ack plain refs":  ackPlainTaskRefs,
	"nack":            nackTask,
	"release":         releaseTask,
}

// ListTasks is the task list's statement, for the plan tests.
const ListTasks = listTasks

// ListWorkers is the workers list's statement, for the plan tests.
const ListWorkers = listWorkers
