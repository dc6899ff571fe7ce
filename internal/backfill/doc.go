// Package backfill moves into history the finished tasks that a release without
// history left in the live table: a database upgraded from such a release keeps its
// done, cancelled and dead tasks (and their attempts) in tasks and attempts until
// the mover takes them, in batches, to task_history and attempt_history.
//
// A pass reads tasks' heap in order, BatchBlocks blocks per transaction, and moves
// the finished rows in them (storage.Store.MoveFinishedBatch): each batch
// locks only the finished rows it moves, under a short lock and statement timeout,
// so the live queue's enqueues, claims and acks never wait on it for long. A crash
// loses and duplicates nothing (each batch commits whole or not at all) and a new
// run simply starts a new pass: the rows already moved are no longer in tasks. A
// pass ends when it has read every block; the mover then counts what is left (rows
// another transaction held, or that an update moved behind the pass), and passes
// again until nothing is.
//
// Moving finished tasks out of tasks is only right once every read sees history too
// and every transition that finishes a task moves it there (migration 0023); from
// then on it runs from `taskforge migrate`, after the
// schema migrations, and from `taskforge serve` in the background. Several movers
// at once (replicas) are safe: a row is moved by one of them, never twice.
//
// Once a run leaves no finished task in tasks, the mover drops the indexes of tasks
// that only finished rows needed (migration 0027 leaves them to it on a database that
// still held finished rows), concurrently, so the live queue stops paying for them.
//
// The mover changes no task's status and touches nothing in Redis (a finished task
// has no entry there), so it is no lifecycle transition; it must never move an
// unfinished task.
package backfill
