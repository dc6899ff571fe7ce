// Package lua holds TaskForge's Redis scripts, one .lua file per atomic operation,
// embedded in the binary. Each script's header lists its KEYS, ARGV and reply. The
// scripts never read a host clock: time comes from Redis TIME or from ARGV. All keys
// of one call share a {q:<name>} hash tag, so the scripts run on Redis Cluster.
package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed pop.lua
var popSource string

// Pop takes up to ARGV[1] ids from the buffer KEYS[1], best first, as id/score pairs.
var Pop = redis.NewScript(popSource)
