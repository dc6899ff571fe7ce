// Package crashpoint lets fault-injection tests kill a serve process at the worst
// moments, such as between popping ids from Redis and committing their claim. It is
// off unless TASKFORGE_CRASHPOINTS names points, which production never sets:
//
//	TASKFORGE_CRASHPOINTS="after-pop=0.01,after-dispatch-commit=0.05"
//
// makes each named point exit the process (as abruptly as SIGKILL: no deferred
// calls, no drain) with the given probability each time it is passed.
package crashpoint

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Points where serve may be told to crash.
const (
	// AfterPop: ids were popped from the Redis buffer; their claim has not committed.
	AfterPop = "after-pop"
	// AfterClaimCommit: the claim committed; the worker has not been answered.
	AfterClaimCommit = "after-claim-commit"
	// AfterDispatchCommit: tasks were committed as claimed; their ids are not yet in Redis.
	AfterDispatchCommit = "after-dispatch-commit"
	// AfterAckCommit: an ack committed; the worker has not been answered.
	AfterAckCommit = "after-ack-commit"
)

// ExitCode is the status a crash point exits with.
const ExitCode = 77

var (
	once  sync.Once
	odds  map[string]float64
	crash = func(point string) {
		fmt.Fprintf(os.Stderr, "crashpoint %s: exiting\n", point)
		os.Exit(ExitCode)
	}
)

func load() {
	odds = map[string]float64{}
	for _, item := range strings.Split(os.Getenv("TASKFORGE_CRASHPOINTS"), ",") {
		name, p, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(p, 64); err == nil && f > 0 {
			odds[name] = f
		}
	}
}

// Hit exits the process with probability set for point, and otherwise returns.
func Hit(point string) {
	once.Do(load)
	if p, ok := odds[point]; ok && rand.Float64() < p {
		crash(point)
	}
}
