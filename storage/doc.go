// Package storage is TaskForge's only door to PostgreSQL, the authority for queues,
// tasks, attempts and workers.
//
// Every SQL statement TaskForge runs is a file of sql/, loaded by statements.go (one
// statement per file, its parameters documented in its header). Each state change of a task
// is one statement (or one short transaction) that changes the task row, and writes
// the attempt it ends (a running attempt is the task row's own: migration 0033), and
// is conditional on the state it expects, so concurrent
// replicas can never both win: a claim only takes tasks still 'claimed', an ack only
// succeeds with the current, unexpired lease token. All time arithmetic uses the
// database clock (now()); durations arrive as parameters in milliseconds.
//
// Task states (as the database and the API spell them; 'claimed' is a task in the
// Redis buffer, StatusBuffered in code, and ClaimTasks is a worker taking it):
//
//	pending ──DispatchDue──► claimed ──ClaimTasks──► executing ──Ack──► done
//	   ▲                                                 │
//	   │             retry ◄──Nack(retryable)/ReclaimExpired (budget left)
//	   │               │                                 └──Nack(permanent)/budget spent──► dead
//	   │               └──DispatchDue (backoff elapsed)──► claimed
//	   ├── Release (a stopping worker; budget not spent) ◄── executing
//	   └── Replay (a new task) ◄── dead
//	pending|claimed|retry ──Cancel──► cancelled;  executing ──Cancel──► cancel_requested
//
// Storage never touches Redis: callers mirror what it returns into the buffer.
// It maps pgx.ErrNoRows and constraint violations to the sentinel errors below and
// lets no pgx error type escape for those cases.
package storage
