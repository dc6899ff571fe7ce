// Package chaos is TaskForge's fault-injection suite. It proves invariant 1 (no
// task is lost) together with 2 and 3 (one valid lease at a time; a done task
// never runs again) and 5 (rate limits, summed over replicas) against the real
// thing: its tests build the taskforge binary, start a throwaway PostgreSQL and
// Redis, three `taskforge serve` replicas behind a small round-robin TCP proxy
// (each reaching PostgreSQL and Redis through proxies of its own that a partition
// cuts) and eight reference workers (`taskforge worker`), and a push target over
// HTTP. Through the API they enqueue thousands of tasks of every kind (failing,
// sleeping past the lease, overrunning timeout_seconds, cancelled while waiting or
// executing, into a rate-limited, a capped and a push queue, and a tenth of them
// into a fair queue whose groups take turns under per-group caps and rates), submit workflows
// (diamonds and fan-ins; some fail, and some of those are resumed by replaying
// their dead step from the DLQ) and let two cron schedules (@every 2s and a six-field */3
// seconds) fire, while a seeded fault schedule runs; then they read PostgreSQL and
// the target's records and check every task, attempt, workflow and schedule tick,
// and for the fair queue each group's cap and rate and the turns (fair_test.go).
//
// The faults: SIGKILL of workers holding tasks and of serve replicas (each is
// restarted), SIGTERM of a worker (graceful stop: it must release, not spend, what
// it holds), SIGSTOP of a worker past its lease (its late heartbeat, ack and nack
// must get 409; the test also checks this with a lease of its own that it lets
// expire), FLUSHALL, SIGSTOP and restart of Redis, fast-shutdown and SIGKILL
// restarts of PostgreSQL and a SIGSTOP of it past the lease, a running replica cut
// off from PostgreSQL and Redis past a push lease, and crash points inside serve
// (internal/crashpoint) on two replicas.
//
// Retention runs through the faults (retention_test.go): each replica's janitor
// deletes in batches what the noop queue's one-minute retention (and the fail queue's
// for dead tasks) lets go, and a janitor of the test's own, on a Store clock it moves a
// day ahead once the producer is done, drops the day's history partitions (finished
// workflows whole) while five more faults strike. Triggers the test installs log every
// row that enters or leaves history; the verifier accounts for every finished task:
// still in history as it entered it, or removed after its retention age, by a
// retention statement or with a day that had expired; none finished left in the hot
// table, none in both, none lost on the way.
//
// The package holds no production code: everything is in its tests, which skip
// under -short. `make test` runs a bounded run (2,000 tasks, 90 s of faults);
// `make chaos` a long one (100,000 tasks, 60 min of faults). Environment:
//
//	TASKFORGE_CHAOS_TASKS     tasks to enqueue (default 2000)
//	TASKFORGE_CHAOS_DURATION  length of the fault window (default 90s)
//	TASKFORGE_CHAOS_SEED      seed of the task mix and fault schedule (default 20260101)
//	TASKFORGE_CHAOS_REPORT    if set, a file to write the figures to (Markdown)
//	TASKFORGE_CHAOS_WORKER_CONCURRENCY
//	                          each of the eight workers' --concurrency (default 4)
//
// The same seed gives the same task mix and the same fault schedule (kinds, times,
// targets and down times); what the processes do in between is up to the machine.
// docs/reliability.md describes the method and records measured runs.
package chaos
