package lifecycle

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

// The seams of the lifecycle: the small interfaces it reaches PostgreSQL and Redis
// through, so that its decisions about follow-ups are tested with fakes, without
// PostgreSQL or Redis (seams_internal_test.go), while the statements themselves
// are tested against PostgreSQL (package storage) and the whole against both
// (the package's other tests). *storage.Store implements every store seam below,
// *buffer.Buffer the Broker.

// TaskStore runs the statements of a task's working life, from its enqueue to its
// end through a worker or the watchdog: the hot path. ExecutingIDs and
// ExecutingGroupSlots let a claim rebuild the concurrency slots Redis lost.
type TaskStore interface {
	EnqueueWith(ctx context.Context, queue string, tasks []storage.NewTask, opts storage.EnqueueOptions) ([]storage.Enqueued, error)
	DispatchDue(ctx context.Context, queue string, limit int, levelWeightMs int64) ([]storage.Buffered, error)
	DispatchDueGrouped(ctx context.Context, queue string, picks []storage.GroupPick) ([]storage.Buffered, error)
	ClaimMany(ctx context.Context, items []storage.ClaimItem, lease time.Duration) (map[uuid.UUID]storage.Task, error)
	AckMany(ctx context.Context, items []storage.AckItem, refs bool) (map[uuid.UUID]storage.Task, error)
	AckAndClaim(ctx context.Context, acks []storage.AckItem, claims []storage.ClaimItem, lease time.Duration) (acked, claimed map[uuid.UUID]storage.Task, err error)
	Nack(ctx context.Context, n storage.Nack) (storage.Task, error)
	Release(ctx context.Context, r storage.Release) (storage.Task, error)
	Heartbeat(ctx context.Context, workerID string, taskID, token uuid.UUID, lease time.Duration) (storage.Lease, error)
	HeartbeatProgress(ctx context.Context, workerID string, taskID, token uuid.UUID, lease time.Duration, progress json.RawMessage) (storage.Lease, error)
	HeartbeatMany(ctx context.Context, workerID string, refs []storage.LeaseRef, lease time.Duration) (map[uuid.UUID]storage.Lease, error)
	ReclaimExpired(ctx context.Context, limit int) ([]storage.Reclaimed, error)
	buffer.ExecutingLister
	buffer.GroupExecutingLister
}

// OperatorStore runs the statements an operator (or a producer) asks of tasks that
// are not theirs to work: cancel, discard and replay.
type OperatorStore interface {
	CancelTask(ctx context.Context, queue string, id uuid.UUID) (storage.Cancelled, error)
	CancelTasks(ctx context.Context, queue string, ids []uuid.UUID) ([]storage.BulkCancelled, error)
	CancelWaiting(ctx context.Context, queue string, statuses []string, batch int, each func([]storage.BulkCancelled)) (int, error)
	// GroupsOf reads the groups of a fair queue's cancelled tasks, to drop their
	// buffer entries.
	GroupsOf(ctx context.Context, queue string, ids []uuid.UUID) ([]storage.GroupSlot, error)
	DiscardDead(ctx context.Context, queue string, id uuid.UUID) error
	DiscardDeadMany(ctx context.Context, queue string, ids []uuid.UUID, all bool, batch int, each func([]uuid.UUID)) (int64, error)
	Replay(ctx context.Context, queue string, ids []uuid.UUID, all bool) ([]storage.Task, error)
}

// QueueStore runs the statements of a queue's settings and its groups' overrides.
type QueueStore interface {
	CreateQueue(ctx context.Context, q storage.Queue) (storage.Queue, error)
	GetQueue(ctx context.Context, name string) (storage.Queue, error)
	UpdateQueue(ctx context.Context, name string, change func(*storage.Queue) error) (storage.Queue, error)
	DeleteQueue(ctx context.Context, name string) error
	PutGroup(ctx context.Context, queue, group string, set storage.GroupSettings) (storage.Group, error)
	DeleteGroup(ctx context.Context, queue, group string) error
}

// WorkflowStore runs the statements of workflows and schedules: the transitions
// that create or end several tasks at once on a plan of their own.
type WorkflowStore interface {
	SubmitWorkflow(ctx context.Context, w storage.NewWorkflow) (storage.SubmittedWorkflow, error)
	CancelWorkflow(ctx context.Context, id uuid.UUID) (storage.Workflow, []storage.CancelledStep, error)
	FireDueSchedule(ctx context.Context, plan storage.PlanFunc, skip []string) (storage.Fired, bool, error)
	TriggerSchedule(ctx context.Context, name string) (storage.Schedule, storage.Task, error)
}

// RetentionStore runs the statements that delete what retention has passed: finished
// tasks and workflows, and history by the row or by the day. *Lifecycle has the same
// methods, the transitions that run them (retention.go), which package janitor drives
// through this interface (janitor.Retention).
type RetentionStore interface {
	DeleteExpiredTasks(ctx context.Context, defaults storage.Retention, limit int, timeout time.Duration) (int64, error)
	DeleteExpiredWorkflows(ctx context.Context, defaults storage.Retention, limit int, timeout time.Duration) (int64, error)
	DeleteExpiredHistory(ctx context.Context, defaults storage.Retention, limit int, timeout time.Duration) (int64, error)
	DeleteHistoryDayWorkflows(ctx context.Context, day storage.HistoryDay, limit int, timeout time.Duration) (int64, error)
	DetachHistoryDay(ctx context.Context, day storage.HistoryDay, lockTimeout time.Duration) (string, error)
	DropDetachedHistory(ctx context.Context, timeout time.Duration) ([]storage.HistoryDay, error)
}

// Store is every statement the lifecycle runs, the seams above together.
type Store interface {
	TaskStore
	OperatorStore
	QueueStore
	WorkflowStore
	RetentionStore
}

var (
	_ TaskStore      = (*storage.Store)(nil)
	_ OperatorStore  = (*storage.Store)(nil)
	_ QueueStore     = (*storage.Store)(nil)
	_ WorkflowStore  = (*storage.Store)(nil)
	_ RetentionStore = (*storage.Store)(nil)
	_ Store          = (*storage.Store)(nil)
	_ RetentionStore = (*Lifecycle)(nil)
)

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
