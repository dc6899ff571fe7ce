// Package janitor enforces TaskForge's retention: it deletes finished tasks (their
// attempts go with them) whose finished_at is older than their queue's retention for
// their status on the database clock, and forgets workers silent for as long as the
// default retention.
//
// History (task_history and attempt_history, partitioned by final status and UTC
// day) leaves by the day: once every queue's retention for a status has passed a
// whole day, the day's partitions are detached (the history tables' locks held for a
// catalog change, their wait bounded by DetachLockTimeout) and dropped, which leaves
// no dead rows; a workflow with a task in that day leaves whole first, and a running
// one holds the day back. What a queue's shorter retention expires earlier, the
// janitor deletes in batches. Each sweep also creates the partitions of the days
// ahead.
//
// It deletes in small batches, each its own short transaction bounded by a
// server-side statement and lock timeout, and skips rows another transaction holds
// (FOR UPDATE SKIP LOCKED), so it never holds locks for long, never waits on live
// traffic, and any number of replicas may run it at once.
//
// The janitor never deletes a task that is not finished: pending, claimed,
// executing and retry tasks stay, and so do dead tasks unless their queue sets a
// retention for them: by default they are kept until an operator replays or
// discards them. It never touches Redis.
package janitor
