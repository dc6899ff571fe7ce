package lifecycle

import (
	"context"

	"github.com/taskforge/taskforge/storage"
)

// The functions below exist for tests (api/export_test.go) that need to watch or
// steer a transition between its steps; production code never calls them.

// CommitHooks watch and steer a group commit (of acks, or of claims).
type CommitHooks struct {
	// Queued runs after a caller's items joined the queue, with how many callers wait.
	Queued func(waiting int)
	// Try runs at the start of each try, under its deadline and inside its panic
	// guard: a panic here is a panic of the batch.
	Try func(ctx context.Context, items int)
}

// SetAckCommitHooks installs h on l's group commits of acks (with or without the
// tasks in the answer).
func SetAckCommitHooks(l *Lifecycle, h CommitHooks) {
	for _, c := range []*groupCommit[storage.AckItem, ackOutcome]{l.acks, l.ackRefs} {
		c.hooks.Store(&commitHooks{queued: h.Queued, try: h.Try})
	}
}

// SetClaimCommitHooks installs h on l's group commit of claims.
func SetClaimCommitHooks(l *Lifecycle, h CommitHooks) {
	l.claims.hooks.Store(&commitHooks{queued: h.Queued, try: h.Try})
}

// SetAckClaimCommitHooks installs h on l's group commit of polls' acks with their
// claims (ClaimAcking).
func SetAckClaimCommitHooks(l *Lifecycle, h CommitHooks) {
	l.ackClaims.hooks.Store(&commitHooks{queued: h.Queued, try: h.Try})
}

// SetAfterClaim makes l call f with the claim's context after each claim commits,
// before Claim returns.
func SetAfterClaim(l *Lifecycle, f func(context.Context)) { l.afterClaim = f }

// SetBeforeAnnounce makes Run's announcer call f with the number of ids before each
// publish (f may block it). Set it before Run starts.
func SetBeforeAnnounce(l *Lifecycle, f func(ids int)) { l.announcer.beforePublish = f }
