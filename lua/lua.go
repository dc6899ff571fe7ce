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

	//go:embed fair_lib.lua
	fairLib string
	//go:embed fair_pop.lua
	fairPopSource string
	//go:embed fair_add.lua
	fairAddSource string
	//go:embed fair_remove.lua
	fairRemoveSource string
	//go:embed fair_release.lua
	fairReleaseSource string
	//go:embed fair_reconcile.lua
	fairReconcileSource string
	//go:embed fair_set.lua
	fairSetSource string
)

// Pop takes ids from a queue's buffer within its rate limit, concurrency cap and
// pause state (see pop.lua).
var Pop = redis.NewScript(popSource)

// Reconcile rebuilds a queue's concurrency slots from the executing tasks PostgreSQL
// reports (see reconcile.lua).
var Reconcile = redis.NewScript(reconcileSource)

// The fair-queue scripts (fairness "round_robin") share the helpers of fair_lib.lua,
// prepended to each; fair_lib.lua documents their keys.
var (
	// FairPop takes ids from a fair queue's group buffers, group by group in weighted
	// turns, within the queue's and each group's limits (see fair_pop.lua).
	FairPop = redis.NewScript(fairLib + fairPopSource)
	// FairAdd buffers ids in their groups' buffers (see fair_add.lua).
	FairAdd = redis.NewScript(fairLib + fairAddSource)
	// FairRemove deletes ids from their groups' buffers (see fair_remove.lua).
	FairRemove = redis.NewScript(fairLib + fairRemoveSource)
	// FairRelease frees the queue and group slots of ids (see fair_release.lua).
	FairRelease = redis.NewScript(fairLib + fairReleaseSource)
	// FairReconcile rebuilds a fair queue's queue and group slots from the executing
	// tasks PostgreSQL reports (see fair_reconcile.lua).
	FairReconcile = redis.NewScript(fairLib + fairReconcileSource)
	// FairSet sets or clears one group's overrides (see fair_set.lua).
	FairSet = redis.NewScript(fairLib + fairSetSource)
)
