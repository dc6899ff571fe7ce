package lifecycle

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Waker is told when a transition leaves work for the replica's dispatcher: Wake
// when a queue has work due now (a retry, a release, a replay, a resume), WakeLow
// when a claim left a queue's buffer nearly empty. *dispatcher.Dispatcher is one.
type Waker interface {
	// Wake asks for queue to be dispatched as soon as possible.
	Wake(queue string)
	// WakeLow asks for a refill of queue's buffer from its backlog.
	WakeLow(queue string)
}

// Config tunes a Lifecycle. Zero fields take the defaults.
type Config struct {
	// LeaseTimeout is the lease a claim grants unless it asks for another. Defaults
	// to 30s.
	LeaseTimeout time.Duration
	// CommitTimeout bounds each try of a group commit (of acks, or of claims); its
	// callers get ErrCommitTimeout when it passes. Defaults to 5s.
	CommitTimeout time.Duration
	// CommitMaxWaiting bounds the callers (an ack, a batch of acks, a poll's claim)
	// waiting for each group commit behind the one running; beyond it, callers get
	// ErrCommitOverloaded at once. Defaults to 2,000.
	CommitMaxWaiting int
	// LowWater is the buffer size below which a claim calls Waker.WakeLow. Zero
	// never does.
	LowWater int
	// WakeOnEnqueue makes an enqueue that created tasks call Waker.Wake. Set it when
	// the dispatcher does not LISTEN (behind a transaction pooler): nothing else
	// tells it of them before its sweep. With LISTEN, the enqueue's NOTIFY does.
	WakeOnEnqueue bool
	// BufferTarget, when positive, lets an enqueue of up to 100 tasks due now put
	// them in the buffer itself (committed as dispatched, then ZADDed) while the
	// queue's buffer holds no more than BufferTarget ids with them, instead of
	// leaving them to the dispatcher's next pass. Set it to the dispatcher's
	// BufferTarget. Zero leaves every task to the dispatcher.
	BufferTarget int
	// Telemetry receives metrics, transition logs and spans; nil disables them.
	Telemetry *telemetry.Telemetry
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.LeaseTimeout = cmp.Or(c.LeaseTimeout, 30*time.Second)
	c.CommitTimeout = cmp.Or(c.CommitTimeout, 5*time.Second)
	c.CommitMaxWaiting = cmp.Or(c.CommitMaxWaiting, 2000)
	return c
}

// Lifecycle runs the transitions of one replica. It keeps no state another replica
// needs: its group commits and task waiters are local, and waiters elsewhere hear
// of finished tasks through the buffer's done channel.
type Lifecycle struct {
	store  Store
	buf    Broker
	wake   Waker
	cfg    Config
	log    *slog.Logger
	tel    *telemetry.Telemetry
	limits *ratelimit.Settings
	// acks commits the acks whose callers answer with the done tasks, ackRefs
	// those whose callers answer without them; storage.Store.AckMany picks each
	// batch's statement (workflow steps among the items, or none).
	acks    *groupCommit[storage.AckItem, ackOutcome]
	ackRefs *groupCommit[storage.AckItem, ackOutcome]
	claims  *groupCommit[claimRequest, []storage.Task]
	// ackClaims commits the acks a poll carries with its claim (ClaimAcking).
	ackClaims *groupCommit[ackClaimRequest, ackClaimOutcome]
	ended     *endHub
	// announcer publishes ended tasks to the other replicas (announce.go).
	announcer *announcer
	// sizes are the buffer sizes this replica saw lately (enqueue.go).
	sizes bufferSizes

	// afterClaim, set only by tests (hooks.go), runs with the claim's context once a
	// claim committed and before Claim returns.
	afterClaim func(context.Context)
}

// New returns a Lifecycle on store and buf that tells wake (nil: nobody) of work
// its transitions leave for the dispatcher. It takes the concrete types, not the
// seams (Store, Broker), because the queue settings it keeps (Limits) are read from
// a *storage.Store by package ratelimit; tests of decisions build a Lifecycle on
// fakes of the seams with newLifecycle instead.
func New(store *storage.Store, buf *buffer.Buffer, wake Waker, cfg Config, log *slog.Logger) *Lifecycle {
	return newLifecycle(store, buf, ratelimit.NewSettings(store, log), wake, cfg, log)
}

// newLifecycle returns a Lifecycle on the seams store and buf, reading queue
// settings from limits.
func newLifecycle(store Store, buf Broker, limits *ratelimit.Settings, wake Waker, cfg Config, log *slog.Logger) *Lifecycle {
	cfg = cfg.WithDefaults()
	l := &Lifecycle{store: store, buf: buf, wake: wake, cfg: cfg, log: log, tel: cfg.Telemetry,
		limits: limits, ended: newEndHub()}
	l.announcer = newAnnouncer(buf.PublishDone, log)
	l.acks = newAckCommit(store, false, cfg.CommitMaxWaiting, cfg.CommitTimeout, cfg.Telemetry, log)
	l.ackRefs = newAckCommit(store, true, cfg.CommitMaxWaiting, cfg.CommitTimeout, cfg.Telemetry, log)
	l.claims = newClaimCommit(store, cfg.LeaseTimeout, cfg.CommitMaxWaiting, cfg.CommitTimeout, cfg.Telemetry, log)
	l.ackClaims = newAckClaimCommit(store, cfg.LeaseTimeout, cfg.CommitMaxWaiting, cfg.CommitTimeout, cfg.Telemetry, log)
	return l
}

// Limits returns the queue settings the transitions use (flow control, push); the
// caller runs its refresh loop (ratelimit.Settings.Run).
func (l *Lifecycle) Limits() *ratelimit.Settings { return l.limits }

// due tells the dispatcher that queue has work due now.
func (l *Lifecycle) due(queue string) {
	if l.wake != nil {
		l.wake.Wake(queue)
	}
}

// releaseSlots frees the concurrency slots of ids. A failure is healed by the
// dispatcher's repair pass.
func (l *Lifecycle) releaseSlots(ctx context.Context, queue string, ids ...uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	if err := l.buf.Release(ctx, queue, ids...); err != nil {
		l.log.Warn("concurrency slots not released; the dispatcher's repair pass will", "queue", queue, "err", err)
	}
}

// releaseGroups frees the queue and group slots of tasks of fair queue, one call per
// group. A failure is healed by the dispatcher's repair pass.
func (l *Lifecycle) releaseGroups(ctx context.Context, queue string, slots ...buffer.GroupSlot) {
	for len(slots) > 0 {
		group := slots[0].Group
		ids := make([]uuid.UUID, 0, len(slots))
		rest := slots[:0:0]
		for _, s := range slots {
			if s.Group == group {
				ids = append(ids, s.ID)
			} else {
				rest = append(rest, s)
			}
		}
		if err := l.buf.ReleaseGroup(ctx, queue, group, ids...); err != nil {
			l.log.Warn("group slots not released; the dispatcher's repair pass will", "queue", queue, "group", group, "err", err)
		}
		slots = rest
	}
}

// releaseTask frees the slots an attempt of task id (of group, nil: the unnamed
// one) held in queue: in a fair queue its queue and group slots, else its queue
// slot. Without the queue's settings, only the queue slot goes; the repair pass
// frees the rest.
func (l *Lifecycle) releaseTask(ctx context.Context, queue string, group *string, id uuid.UUID) {
	limits, ok, err := l.limits.Get(ctx, queue)
	if err != nil {
		l.log.Warn("could not read the queue's settings to free the task's slots; its queue slot goes, the slot sync frees the rest",
			"queue", queue, "task_id", id, "err", err)
	}
	if ok && limits.Fair {
		l.releaseGroups(ctx, queue, buffer.GroupSlot{Group: groupOf(group), ID: id})
		return
	}
	if err == nil && ok && limits.MaxConcurrency == 0 {
		return // an uncapped plain queue keeps no slots
	}
	l.releaseSlots(ctx, queue, id)
}

// groupOf is the buffer's name of a task's group: "" for the unnamed one.
func groupOf(g *string) string {
	if g == nil {
		return ""
	}
	return *g
}

// releaseIfCapped frees the concurrency slots of ids when queue has a cap.
func (l *Lifecycle) releaseIfCapped(ctx context.Context, limits ratelimit.Limits, queue string, ids ...uuid.UUID) {
	if limits.MaxConcurrency > 0 {
		l.releaseSlots(ctx, queue, ids...)
	}
}

// removeBuffered drops cancelled ids from queue's buffer: a claim would skip them
// anyway (they are no longer claimable), but removing them keeps them from taking a
// poll's place. A fair queue's entries are left, since their groups are not known
// here: a pop hands each to a claim that drops it and frees the slots it took.
func (l *Lifecycle) removeBuffered(ctx context.Context, queue string, ids ...uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	if limits, ok, err := l.limits.Get(ctx, queue); err == nil && ok && limits.Fair {
		return
	}
	if err := l.buf.Remove(ctx, queue, ids...); err != nil {
		l.log.Warn("cancelled tasks left in buffer", "queue", queue, "tasks", len(ids), "err", err)
	}
}

// removeBufferedTask drops one cancelled task (of group, nil: the unnamed one) from
// queue's buffer, a fair queue's group buffer included.
func (l *Lifecycle) removeBufferedTask(ctx context.Context, queue string, group *string, id uuid.UUID) {
	limits, ok, err := l.limits.Get(ctx, queue)
	if err == nil && ok && limits.Fair {
		err = l.buf.RemoveGrouped(ctx, queue, []buffer.GroupSlot{{Group: groupOf(group), ID: id}}, buffer.LevelWeightMs(limits.AgingMs))
	} else {
		err = l.buf.Remove(ctx, queue, id)
	}
	if err != nil {
		l.log.Warn("cancelled task left in buffer", "task_id", id, "err", err)
	}
}

// Terminal reports whether status is one a task never leaves.
func Terminal(status string) bool {
	return status == storage.StatusDone || status == storage.StatusDead || status == storage.StatusCancelled
}

// ofStep adds the workflow step that task t runs, if any, to a transition of t.
func ofStep(t storage.Task, tr telemetry.Transition) telemetry.Transition {
	if t.WorkflowID != nil && t.Step != nil {
		tr.WorkflowID, tr.Step = *t.WorkflowID, *t.Step
	}
	return tr
}
