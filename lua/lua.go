// Package lua holds TaskForge's Redis scripts, one .lua file per atomic operation,
// embedded in the binary. Each script's header lists its KEYS, ARGV and reply. The
// scripts never read a host clock: time comes from Redis TIME. All keys of one call
// share a {q:<name>} hash tag, so the scripts run on Redis Cluster.
package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed pop.lua
	popSource string
	//go:embed reconcile.lua
	reconcileSource string
)

// Pop takes ids from a queue's buffer within its rate limit, concurrency cap and
// pause state (see pop.lua).
var Pop = redis.NewScript(popSource)

// Reconcile rebuilds a queue's concurrency slots from the executing tasks PostgreSQL
// reports (see reconcile.lua).
var Reconcile = redis.NewScript(reconcileSource)
