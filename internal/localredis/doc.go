// Package localredis runs a throwaway redis-server from the binary installed on
// this machine, with no container and no system service involved.
//
// It owns the whole life of one such server: finding redis-server on PATH,
// starting it on a free port of 127.0.0.1 without persistence (its log and, for a
// cluster node, its nodes.conf live in a private temporary directory), waiting
// until it answers PING, killing it (crash tests), restarting it on the same port
// with empty data, and stopping it for good. The process is in its own process
// group and is killed when the calling process dies, even without Stop.
//
// It is the one Redis launcher of the repository: the test harness
// (internal/testenv) starts dedicated servers and cluster nodes with it, and the
// benchmark harness (internal/bench) starts the Redis of a benchmark run.
//
// The package does not own keys, scripts or client pools: callers connect to
// Addr with the client of their choice.
package localredis
