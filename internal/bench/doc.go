// Package bench is TaskForge's end-to-end benchmark harness, run by
// `taskforge bench` (and `make bench-e2e`). It measures the whole system as a
// user deploys it: a `taskforge serve` process, reference `taskforge worker`
// processes talking to it over HTTP, a real PostgreSQL and a real Redis.
//
// # Experiments
//
//   - e1: no-op tasks, enqueued in batches while the queue is paused, then
//     released at once and drained by each worker layout in turn.
//   - e2: the same with 50 ms sleeps, reporting parallel efficiency,
//     throughput / (workers × 1000 / sleep ms).
//   - latency: tasks enqueued one per request at a steady rate to idle,
//     long-polling workers; enqueue → worker receipt percentiles.
//   - e5: every task fails once, then succeeds; each history must be exactly
//     attempt 1 failed, attempt 2 succeeded.
//   - e6: workers SIGKILLed while holding a task in every slot; the lag from each
//     abandoned lease's expiry, and from the kill, to the task's re-delivery to
//     an idle survivor, under each lease variant (the server's defaults, and
//     short leases).
//   - scale (run only when named): how costs grow with the number of queues
//     and with the rows of a queue. The queues curve: for each count N, N queues
//     each holding one task due in an hour; the CPU of serve and PostgreSQL while
//     serve is left alone, then enqueue → receipt by a long-polling worker (the
//     harness itself, on its own clock) on one of the queues, one task at a time.
//     The rows curve: for each count M, M pending tasks in one queue; with one
//     dashboard live feed open, the round trips of the queue's stats and of
//     /metrics, the feed's refreshes, and PostgreSQL's CPU while /metrics is
//     scraped every few seconds.
//
// A layout "PxC" is P worker processes each running up to C tasks at once (and
// so polling for up to C tasks per request): "16x1" is sixteen workers that each
// ask for one task at a time, "1x16" one process that asks for up to sixteen.
// "PxC+F" sets each worker's prefetch (default: its concurrency) to F: "16x1+0" prefetches nothing.
//
// # Method
//
// Every step (one layout of one experiment in one run) gets its own database,
// created on the configured server and dropped after, its own Redis key prefix,
// deleted after, and its own serve process; so steps start from the same empty
// state. Warm-up tasks go through the step's serve and workers first and are
// excluded. Throughput and latency come from the attempts table, on the
// database clock: throughput is tasks / (last attempt's finish − first attempt's
// start); latency is tasks.created_at → attempts.started_at. E1, E2 and latency
// repeat Config.Runs times, run by run (so noise spreads over all of them) and
// the report gives medians. Randomness (E6's kill moments) comes from the seed.
//
// During each measured window the harness reads the CPU time (utime + stime in
// /proc/<pid>/stat) of serve, the workers and itself, of PostgreSQL's processes
// (backends of the step's database apart from background processes and other
// databases) and Redis, and the whole machine's (/proc/stat), to show where the
// CPU goes. A parallel worker counts for its leader's database. The scale
// experiment's windows sample every 100 ms and keep the last CPU time of each
// process seen, so that the parallel workers and backends that exit within a
// window are counted too. With Config.ProfileDir, E1's serve processes also write a CPU profile
// of each measured window (see ServeProfiler).
//
// # What it must never do
//
// The harness changes TaskForge's state only through the HTTP API, as a user
// would; it reads the tables, never writes them, with one exception: the scale
// experiment bulk-loads its queues and tasks with harness-only SQL (see
// queries.go), through plain INSERTs so that the tables' triggers fire, into a
// database freshly migrated by the binary's `migrate` command and before the
// step's serve starts, so that serve starts on them as after a restart. It never touches a database or
// Redis key it did not create, and every process it starts is in a process
// group of its own that it stops (SIGTERM, then SIGKILL) before Run returns,
// whether the run succeeded or not; the children also get SIGKILL should the
// harness die first. It waits on conditions it polls, never on fixed sleeps,
// except where nothing can be observed (E6's seeded kill moment and the settling
// of heartbeats in flight at the kill) and for the scale experiment's measurement
// windows and pacing.
package bench
