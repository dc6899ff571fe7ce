package storage

import (
	"embed"
	"fmt"
	"strings"
)

// Every SQL statement the Store runs is a file of sql/, one statement each, named
// after it and headed by a comment that documents its $n parameters and what it
// returns. The files are embedded and read once, at init; a missing file panics
// there, so a binary that starts has every statement it names.
//
// Time: durations arrive as milliseconds; "now" is the database's now(), except in
// the statements that compute or compare lease expiries and due times (claim,
// heartbeat, ack, nack, release, reclaim, dispatch, the sweep and the repair pass):
// there it is coalesce($n::timestamptz, now()), $n being the Store's clock
// (WithClock) or NULL, so tests set the clock instead of sleeping. The statements
// that say how long to wait (next_due, newly_due, next_lease_expiry) feed wall-clock
// timers and keep the database's now().
//
// By primary key: the statements that take tasks by id (claim, heartbeat, ack, nack,
// release) write their status guard as
//
//	t.status || '' = 'executing'
//
// which reads the same but from which no partial index's predicate can be proven.
// With t.status = '…', the planner may take a partial index of that status instead
// of the primary key (tasks_buffered_idx for 'claimed', tasks_lease_idx for
// 'executing'), and when its statistics were taken while few tasks had that status
// (an idle queue, or autovacuum not yet caught up after a burst) it does, and then
// reads the whole index for each id. The primary key costs a few buffers per id
// whatever the status counts (TestByIDStatementsUseThePrimaryKey).
//
// No join on the hot path: the hot-path statements that take tasks by id (claim,
// plain ack, heartbeats) take them with t.id = ANY($1), each task's other inputs
// found by its id's position in $1 (array_position) or by a scalar subquery over the
// input's rows for that task (a token given twice), rather than joining tasks to
// unnest($1, ...). A join let the planner choose how to meet the ids, and a generic
// plan made while tasks was small (1,600 rows) scanned the table and hashed the ids,
// a plan the connection keeps as the table grows (until an ANALYZE, or a change of
// one of its indexes' height, makes it plan again); with no join there is no such
// choice, and the hot-path connections' enable_seqscan = off and enable_bitmapscan =
// off (HotPathSettings) leave one plan: an index scan of tasks_pkey, one probe per id
// (TestByIDStatementsProbeOnStaleStatistics). What no statement form bounds is a
// tasks that PostgreSQL believes empty (analysed with no live row but pages left):
// every read of it then costs about one page, and an index holding id among its
// columns (tasks_status_list_idx) ties with the primary key (see design-notes.md,
// "Plans made once").
//
// Plain lease tokens: a claim gives a task outside a workflow a random UUID of
// version 8 (RFC 9562's vendor-specific version), where a workflow step's is of
// version 4, so that an ack can be sent to the statement for its kind of task before
// anything is read (PlainLeaseToken). A token is only ever matched whole, so one of
// the wrong kind is simply not the task's token.
//
// Inline tally: on a hot-path connection (HotPathSettings) tally_written_inline() is
// true, the statements of a task's hot path (enqueue, claim, plain ack) append their
// own count deltas, and the tally triggers stand aside (migration 0013); with
// group_tally_written_inline() they append their named groups' deltas too, and the
// group counts' row triggers stand aside but for a change of group (migration 0028).
//
// Workflows (migration 0011): a workflow's bookkeeping rides inside the statements
// that end its steps' tasks, so it commits with them or not at all. Every statement
// that touches a workflow locks it first (wf_locked), before any of its tasks, in id
// order, so two of them never deadlock on it. After an ack, the done steps' dependents
// whose dependencies are now all done move from blocked to pending, their queues'
// dispatchers are woken (NOTIFY on commit), and the last step ends the workflow
// succeeded. After a step ends dead or cancelled, every other unfinished step is
// cancelled (executing ones get cancel_requested), each with a last_error naming the
// step, and the workflow ends failed or cancelled. Only the current task of a step
// counts (workflow_steps.task_id): a task a resume replaced changes nothing when it
// ends.

//go:embed sql/*.sql
var statementFiles embed.FS

// statements maps each loaded statement's name to its text (TestStatementFiles
// checks it against the files).
var statements = map[string]string{}

// mustLoad returns the statement in sql/<name>.sql and records it in statements. It
// panics on a missing or empty file, so the mistake shows at init, not when the
// statement first runs.
func mustLoad(name string) string {
	b, err := statementFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("storage: statement %s: %v", name, err))
	}
	text := strings.TrimSpace(statementBody(string(b)))
	if text == "" {
		panic(fmt.Sprintf("storage: statement %s is empty", name))
	}
	if _, dup := statements[name]; dup {
		panic(fmt.Sprintf("storage: statement %s loaded twice", name))
	}
	statements[name] = text
	return text
}

// statementBody is a statement file without its header, the comment lines before
// the first line of SQL: the header documents the statement for its readers, and
// need not travel to PostgreSQL with every execution.
func statementBody(file string) string {
	for strings.HasPrefix(file, "--") {
		_, rest, ok := strings.Cut(file, "\n")
		if !ok {
			return ""
		}
		file = rest
	}
	return file
}

var (
	insertQueue              = mustLoad("insert_queue")
	getQueue                 = mustLoad("get_queue")
	listQueues               = mustLoad("list_queues")
	updateQueue              = mustLoad("update_queue")
	lockQueueForDelete       = mustLoad("lock_queue_for_delete")
	holdsLiveTasks           = mustLoad("holds_live_tasks")
	deleteQueue              = mustLoad("delete_queue")
	enqueueTasks             = mustLoad("enqueue_tasks")
	enqueueTaskRefs          = mustLoad("enqueue_task_refs")
	enqueueDebounced         = mustLoad("enqueue_debounced")
	idempotencyReservations  = mustLoad("idempotency_reservations")
	freeExpiredKeys          = mustLoad("free_expired_idempotency_keys")
	deleteExpiredKeys        = mustLoad("delete_expired_idempotency_keys")
	deleteDroppedKeys        = mustLoad("delete_dropped_idempotency_keys")
	tasksByIdempotencyKey    = mustLoad("tasks_by_idempotency_key")
	notifyDue                = mustLoad("notify_due")
	getTask                  = mustLoad("get_task")
	taskAttempts             = mustLoad("task_attempts")
	listTasks                = mustLoad("list_tasks")
	listGroupTasks           = mustLoad("list_group_tasks")
	cancelTask               = mustLoad("cancel_task")
	taskStatus               = mustLoad("task_status")
	foldTally                = mustLoad("fold_tally")
	foldGroupTally           = mustLoad("fold_group_tally")
	pruneGroupTally          = mustLoad("prune_group_tally")
	groupCounts              = mustLoad("group_counts")
	putGroup                 = mustLoad("put_group")
	deleteGroup              = mustLoad("delete_group")
	groupSettings            = mustLoad("group_settings")
	listGroupNames           = mustLoad("list_group_names")
	queueTally               = mustLoad("queue_tally")
	oldestWaiting            = mustLoad("oldest_waiting")
	deleteQueueTally         = mustLoad("delete_queue_tally")
	deleteOldBuckets         = mustLoad("delete_old_buckets")
	recountQueue             = mustLoad("recount_queue")
	dispatchDue              = mustLoad("dispatch_due")
	dueGroups                = mustLoad("due_groups")
	dispatchDueGrouped       = mustLoad("dispatch_due_grouped")
	executingInFairQueues    = mustLoad("executing_in_fair_queues")
	executingGroupSlots      = mustLoad("executing_group_slots")
	groupOverrides           = mustLoad("group_overrides")
	nextDue                  = mustLoad("next_due")
	newlyDue                 = mustLoad("newly_due")
	dueQueues                = mustLoad("due_queues")
	disableJIT               = mustLoad("disable_jit")
	hotPathSettings          = mustLoad("hot_path_settings")
	dbNow                    = mustLoad("db_now")
	queuesNamed              = mustLoad("queues_named")
	queuesChangedSince       = mustLoad("queues_changed_since")
	listBuffered             = mustLoad("list_buffered")
	orderedScanOnly          = mustLoad("ordered_scan_only")
	executingInCappedQueues  = mustLoad("executing_in_capped_queues")
	claimTasks               = mustLoad("claim_tasks")
	heartbeatTask            = mustLoad("heartbeat_task")
	heartbeatTasks           = mustLoad("heartbeat_tasks")
	upsertWorker             = mustLoad("upsert_worker")
	ackTasks                 = mustLoad("ack_tasks")
	ackPlainTasks            = mustLoad("ack_plain_tasks")
	ackPlainTaskRefs         = mustLoad("ack_plain_task_refs")
	nackTask                 = mustLoad("nack_task")
	releaseTask              = mustLoad("release_task")
	reclaimExpired           = mustLoad("reclaim_expired")
	workerHeartbeatAges      = mustLoad("worker_heartbeat_ages")
	executingIDs             = mustLoad("executing_ids")
	nextLeaseExpiry          = mustLoad("next_lease_expiry")
	listWorkers              = mustLoad("list_workers")
	listDead                 = mustLoad("list_dead")
	lockDead                 = mustLoad("lock_dead")
	replayDead               = mustLoad("replay_dead")
	discardDead              = mustLoad("discard_dead")
	queueNames               = mustLoad("queue_names")
	queueExists              = mustLoad("queue_exists")
	setRetentionTimeouts     = mustLoad("set_retention_timeouts")
	deleteExpiredTasks       = mustLoad("delete_expired_tasks")
	deleteSilentWorkers      = mustLoad("delete_silent_workers")
	insertToken              = mustLoad("insert_token")
	listTokens               = mustLoad("list_tokens")
	lockActiveAdmins         = mustLoad("lock_active_admins")
	revokeToken              = mustLoad("revoke_token")
	tokenSnapshot            = mustLoad("token_snapshot")
	sessionSnapshot          = mustLoad("session_snapshot")
	insertSession            = mustLoad("insert_session")
	deleteSession            = mustLoad("delete_session")
	unsealedTasks            = mustLoad("unsealed_tasks")
	resealTasks              = mustLoad("reseal_tasks")
	unsealedAttemptErrors    = mustLoad("unsealed_attempt_errors")
	resealAttemptErrors      = mustLoad("reseal_attempt_errors")
	insertAudit              = mustLoad("insert_audit")
	listAudit                = mustLoad("list_audit")
	deleteExpiredAudit       = mustLoad("delete_expired_audit")
	insertSchedule           = mustLoad("insert_schedule")
	getSchedule              = mustLoad("get_schedule")
	lockSchedule             = mustLoad("lock_schedule")
	listSchedules            = mustLoad("list_schedules")
	updateSchedule           = mustLoad("update_schedule")
	deleteSchedule           = mustLoad("delete_schedule")
	claimDueSchedule         = mustLoad("claim_due_schedule")
	scheduleFired            = mustLoad("schedule_fired")
	scheduleTriggered        = mustLoad("schedule_triggered")
	nextScheduleIn           = mustLoad("next_schedule_in")
	schedulesOfQueue         = mustLoad("schedules_of_queue")
	unsealedSchedules        = mustLoad("unsealed_schedules")
	resealSchedule           = mustLoad("reseal_schedule")
	bulkCancelWaiting        = mustLoad("bulk_cancel_waiting")
	bulkPruneHeads           = mustLoad("bulk_prune_heads")
	bulkCancelIDs            = mustLoad("bulk_cancel_ids")
	bulkDiscardDead          = mustLoad("bulk_discard_dead")
	anyWithStatus            = mustLoad("any_with_status")
	anyDead                  = mustLoad("any_dead")
	insertWorkflow           = mustLoad("insert_workflow")
	workflowByIdempotencyKey = mustLoad("workflow_by_idempotency_key")
	lockQueuesForWorkflow    = mustLoad("lock_queues_for_workflow")
	insertWorkflowTasks      = mustLoad("insert_workflow_tasks")
	insertWorkflowSteps      = mustLoad("insert_workflow_steps")
	insertWorkflowEdges      = mustLoad("insert_workflow_edges")
	getWorkflow              = mustLoad("get_workflow")
	workflowSteps            = mustLoad("workflow_steps")
	listWorkflows            = mustLoad("list_workflows")
	lockWorkflow             = mustLoad("lock_workflow")
	lockWorkflowTasks        = mustLoad("lock_workflow_tasks")
	cancelWorkflowTasks      = mustLoad("cancel_workflow_tasks")
	endWorkflow              = mustLoad("end_workflow")
	resumeWorkflow           = mustLoad("resume_workflow")
	recreateSteps            = mustLoad("recreate_steps")
	failedWorkflowSteps      = mustLoad("failed_workflow_steps")
	workflowOfDead           = mustLoad("workflow_of_dead")
	expiredWorkflows         = mustLoad("expired_workflows")
	deleteWorkflows          = mustLoad("delete_workflows")
	pushQueues               = mustLoad("push_queues")
	cancelRequestedAmong     = mustLoad("cancel_requested_among")
	recentPushAnswers        = mustLoad("recent_push_answers")
	unsealedPushSecrets      = mustLoad("unsealed_push_secrets")
	resealPushSecret         = mustLoad("reseal_push_secret")
	listenDue                = mustLoad("listen_due")
	createDatabaseStatement  = mustLoad("create_database_statement")
	selectDatabaseExists     = mustLoad("select_database_exists")
)
