// Package lifecycle owns every transition of a task, from its enqueue on, end to
// end: the PostgreSQL statement (package storage keeps the SQL), the Redis follow-up
// (package buffer: concurrency slots, buffer entries, wake-ups, the announcement of
// finished tasks) and the telemetry event (transition log, metrics, spans). Each
// transition reads top to bottom in one function:
//
//	Enqueue            new → pending, and SubmitWorkflow for a workflow's steps
//	                   (enqueue.go)
//	Dispatch           pending or retry → buffered: the statement, then
//	                   the buffer's ZADD, for the dispatcher (dispatch.go)
//	FireDueSchedule    a schedule's tick → a new pending task, for the scheduler;
//	TriggerSchedule    the same outside the cadence, for the API (schedule.go)
//	Claim, ClaimPush   buffered → executing: pop within the token bucket and the
//	                   concurrency slots, claim through the group commit, put back
//	                   or free what was not claimed (claim.go)
//	ReleaseUnread      executing → pending for tasks claimed for a poll whose
//	                   worker hung up before the answer (claim.go)
//	Ack, AckMany       executing → done, through the group commit (finish.go)
//	Nack               executing → retry, dead or cancelled (finish.go)
//	Release            executing → pending, snoozed or not (finish.go)
//	Reclaim            executing → retry, dead or cancelled for expired leases and
//	                   attempts over their timeout, for the watchdog (finish.go)
//	Cancel, CancelMany waiting → cancelled, or executing → cancel requested
//	                   (cancel.go)
//	CancelWorkflow     the steps of a workflow, as Cancel would each (cancel.go)
//	Replay             dead → a new pending task, one or many (replay.go)
//	ChangeQueue        pause, resume and limit changes of a queue (queue.go)
//	DeleteQueue        a queue and its buffer (queue.go)
//
// Callers decode, validate and encode (package api), or decide when to run and how
// much (packages dispatcher, watchdog, scheduler and push); none of them repeats a
// follow-up of its own (ownership_test.go checks it).
// PostgreSQL is the authority: a follow-up that fails is logged and healed later
// (the dispatcher's repair pass, a waiter's deadline), never retried here.
//
// It reaches PostgreSQL and Redis through small interfaces (seams.go: the task,
// operator, queue, workflow and retention statements, and the Broker), so that its
// decisions are tested on fakes without either (seams_internal_test.go), and its
// statements against PostgreSQL in package storage.
//
// The package never changes a task in Redis without its PostgreSQL statement having
// committed first, and never decides a task's next status itself: the storage
// statement does (workflows' unblocking and cascade included).
package lifecycle
