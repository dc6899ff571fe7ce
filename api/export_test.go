package api

import (
	"context"

	"github.com/taskforge/taskforge/internal/lifecycle"
)

// SetAfterClaim makes s call f with the poll's request context after each claim
// commits, before the poll answers (for tests of what happens in between).
func SetAfterClaim(s *Server, f func(context.Context)) { lifecycle.SetAfterClaim(s.lc, f) }

// CommitHooks watch and steer a Server's group commit (of acks, or of claims), for
// tests that need to know when a batch runs or to hold it.
type CommitHooks struct {
	// Queued runs after a request's items joined the queue, with how many wait.
	Queued func(waiting int)
	// Try runs at the start of each try, under its deadline and inside its panic
	// guard: a panic here is a panic of the batch.
	Try func(ctx context.Context, items int)
}

// SetAckCommitHooks installs h on s's group commit of acks.
func SetAckCommitHooks(s *Server, h CommitHooks) {
	lifecycle.SetAckCommitHooks(s.lc, lifecycle.CommitHooks(h))
}

// SetClaimCommitHooks installs h on s's group commit of claims.
func SetClaimCommitHooks(s *Server, h CommitHooks) {
	lifecycle.SetClaimCommitHooks(s.lc, lifecycle.CommitHooks(h))
}

// SetAckClaimCommitHooks installs h on s's group commit of polls' acks with their
// claims.
func SetAckClaimCommitHooks(s *Server, h CommitHooks) {
	lifecycle.SetAckClaimCommitHooks(s.lc, lifecycle.CommitHooks(h))
}

// SetBulkBatch makes s's bulk operations change at most rows rows per transaction and
// call after with the rows of each committed batch.
func SetBulkBatch(s *Server, rows int, after func(rows int)) {
	s.bulkRows, s.afterBulkBatch = rows, after
}

// TaskWaiters returns how many requests wait on s for a task to end.
func TaskWaiters(s *Server) int { return s.lc.Waiting() }

// Parked is how many long polls wait on queue: a test that needs a poll parked
// (past its claims, waiting for a wake-up) before it acts waits for this.
func Parked(s *Server, queue string) int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return len(s.hub.waiters[queue])
}
