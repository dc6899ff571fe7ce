// Package localpg runs a PostgreSQL server from the PostgreSQL binaries
// installed on this machine (initdb, pg_ctl, postgres), with no container
// and no system service involved.
//
// It owns the whole life of one such server: finding the binaries
// (FindBinaries), creating a cluster with initdb when the data directory holds
// none, starting the postmaster on 127.0.0.1 with its Unix socket in a private
// directory, waiting until it accepts connections, and stopping, killing
// (crash tests) and restarting it. It is used by the test harness
// (internal/testenv) for throwaway servers and by `taskforge dev`, which keeps
// its cluster in a fixed data directory between runs.
//
// A server started with an empty Options.DataDir is a throwaway: its cluster
// lives in a temporary directory, runs with fsync off, and is deleted by Stop.
// Options.Settings override any of Start's settings: the benchmark harness
// (internal/bench) starts a throwaway cluster configured as production runs it,
// autovacuum and fsync on.
// Temporary directories left behind by processes that died without calling
// Stop are removed by later calls to Start.
//
// PostgreSQL refuses to run as root. When the calling process is root, the
// server programs are run as the `postgres` system user (or `nobody` when
// there is no such user), and the directories they need are handed to that
// user (see Start).
//
// The package does not own schemas, migrations or connection pools: callers
// connect to URL with the driver of their choice.
package localpg
