package lifecycle

import (
	"context"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

// The seams of the lifecycle: the small interfaces it reaches Redis and the
// reclaim statement through, so that decisions about follow-ups are tested with
// fakes, without PostgreSQL or Redis (TestReclaimFollowUps), while the statements
// themselves are tested against PostgreSQL (package storage).

// Broker is what the transitions need of Redis: the buffer's entries, the
// concurrency slots, the wake-ups of parked polls and the announcement of ended
// tasks. *buffer.Buffer implements it.
type Broker interface {
	Add(ctx context.Context, queue string, tasks []storage.Buffered, levelWeightMs int64) error
	Putback(ctx context.Context, queue string, entries []buffer.Entry) error
	Pop(ctx context.Context, queue string, n int, limits ratelimit.Limits) (buffer.Popped, error)
	Release(ctx context.Context, queue string, ids ...uuid.UUID) error
	Remove(ctx context.Context, queue string, ids ...uuid.UUID) error
	SyncSlots(ctx context.Context, db buffer.ExecutingLister, queue string) error
	Unsync(ctx context.Context, queue string) error
	Wake(ctx context.Context, queue string, n int) error
	Sizes(ctx context.Context, queues []string) (map[string]int64, error)
	Drop(ctx context.Context, queue string) error
	PublishDone(ctx context.Context, ids ...uuid.UUID) error

	// The fair queues' buffer, by group (buffer/fair.go).
	AddGrouped(ctx context.Context, queue string, tasks []buffer.GroupedTask, levelWeightMs int64) error
	PutbackGrouped(ctx context.Context, queue string, entries []buffer.FairEntry, levelWeightMs int64) error
	FairPop(ctx context.Context, queue string, n int, limits ratelimit.Limits, group buffer.GroupLimits) (buffer.FairPopped, error)
	ReleaseGroup(ctx context.Context, queue, group string, ids ...uuid.UUID) error
	RemoveGrouped(ctx context.Context, queue string, tasks []buffer.GroupSlot, levelWeightMs int64) error
	SyncGroupSlots(ctx context.Context, db buffer.GroupExecutingLister, queue string) error
	SetGroup(ctx context.Context, queue, group string, s buffer.GroupSettings) error
	FairSize(ctx context.Context, queue string) (ids, groups int64, err error)
	GroupSizes(ctx context.Context, queue string, groups []string) (map[string]int64, error)
	DropFair(ctx context.Context, queue string) error
}

var _ Broker = (*buffer.Buffer)(nil)

// reclaimer runs the reclaim's statement (storage.Store.ReclaimExpired).
type reclaimer interface {
	ReclaimExpired(ctx context.Context, limit int) ([]storage.Reclaimed, error)
}
