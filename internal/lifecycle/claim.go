package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/crashpoint"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Claim takes up to want tasks of one queue for workerID: it pops ids from the
// buffer within the queue's token bucket and concurrency slots (limits), claims
// them in PostgreSQL through the group commit with a lease of the given length (0:
// Config.LeaseTimeout), puts the ids back when the claim fails, and frees the slots
// of ids PostgreSQL no longer considered claimable. It also returns, when the rate
// limit held tasks back, how long until the queue holds a token. Once popped, ids
// are claimed or given back even if ctx ends. A fair queue (limits.Fair) pops by
// group, in weighted turns within its group caps and buckets (buffer.FairPop).
func (l *Lifecycle) Claim(ctx context.Context, workerID, queue string, limits ratelimit.Limits, want int, lease time.Duration) ([]storage.Task, time.Duration, error) {
	out, _, retry, err := l.ClaimAcking(ctx, workerID, queue, limits, want, lease, nil)
	return out, retry, err
}

// ClaimAcking is Claim for a poll that carries acks of workerID's finished tasks
// (lease 0): when the buffer holds work, the
// acks commit in the claim's transaction (one commit, not two in series);
// otherwise they commit alone (AckMany without tasks), and a pop a concurrency cap
// held back is tried again, since the acks freed their slots. acked holds one
// outcome per ack once they committed, also when err reports a later failure, and
// is nil when they did not (err then says why).
func (l *Lifecycle) ClaimAcking(ctx context.Context, workerID, queue string, limits ratelimit.Limits, want int, lease time.Duration,
	acks []storage.AckItem) (out []storage.Task, acked []AckOutcome, retryAfter time.Duration, err error) {
	if len(acks) > 0 && lease != 0 {
		return nil, nil, 0, fmt.Errorf("claim with acks: a poll's claim takes the default lease")
	}
	// ackAlone commits the acks by themselves, when no claim can carry them.
	ackAlone := func() error {
		acked, err = l.AckMany(ctx, workerID, acks, false)
		acks = nil
		return err
	}
	if slices.ContainsFunc(acks, func(it storage.AckItem) bool { return !storage.PlainLeaseToken(it.LeaseToken) }) {
		// A workflow step's ack runs its cascade in another statement: first, alone.
		if err := ackAlone(); err != nil {
			return nil, nil, 0, err
		}
	}
	synced := false
	for len(out) < want {
		popped, err := l.pop(ctx, queue, want-len(out), limits)
		if err != nil {
			return out, acked, 0, fmt.Errorf("pop from queue %s: %w", queue, err)
		}
		if popped.NeedSync && !synced {
			// Redis lost the queue's concurrency slots: rebuild them, then pop again.
			if err := l.syncSlots(ctx, queue, limits); err != nil {
				return out, acked, 0, fmt.Errorf("rebuild concurrency slots of queue %s: %w", queue, err)
			}
			synced = true
			continue
		}
		if l.cfg.BufferTarget > 0 {
			l.sizes.saw(queue, popped.Remaining)
		}
		if len(popped.Entries) > 0 && popped.Remaining < l.cfg.LowWater && l.wake != nil {
			l.wake.WakeLow(queue)
		}
		if len(popped.Entries) == 0 && len(acks) > 0 {
			if err := ackAlone(); err != nil {
				return out, nil, 0, err
			}
			if popped.AtCap {
				continue // the acks freed slots
			}
		}
		if len(popped.Entries) == 0 {
			switch {
			case popped.Paused:
				l.tel.LimitedPoll(queue, "paused")
			case popped.AtCap:
				l.tel.LimitedPoll(queue, "concurrency")
			case popped.RetryAfter > 0:
				l.tel.LimitedPoll(queue, "rate")
			}
			return out, acked, popped.RetryAfter, nil
		}
		ids := make([]uuid.UUID, len(popped.Entries))
		for i, e := range popped.Entries {
			ids[i] = e.ID
		}
		crashpoint.Hit(crashpoint.AfterPop)
		// Once popped, the ids must be claimed or given back even if the worker hangs up.
		bg := context.WithoutCancel(ctx)
		start := time.Now()
		var claimed []storage.Task
		req := claimRequest{ids: ids, workerID: workerID, lease: lease}
		if len(acks) > 0 {
			var won []ackClaimOutcome
			won, err = l.ackClaims.do(bg, ackClaimRequest{acks: acks, claim: req})
			if err == nil {
				acks, acked, claimed = nil, l.acked(ctx, workerID, won[0].acks), won[0].claims
			}
		} else {
			var won [][]storage.Task
			won, err = l.claims.do(bg, req)
			if err == nil {
				claimed = won[0]
			}
		}
		l.tel.ObserveClaim(time.Since(start))
		if err == nil && len(claimed) > 0 {
			crashpoint.Hit(crashpoint.AfterClaimCommit)
			if l.afterClaim != nil {
				l.afterClaim(ctx)
			}
		}
		if err != nil {
			if perr := l.putback(bg, queue, limits, popped.Entries); perr != nil {
				l.log.Warn("popped ids not returned to buffer; repair will re-add them", "queue", queue, "err", perr)
			}
			l.releasePopped(bg, queue, limits, popped.Entries)
			return out, acked, 0, fmt.Errorf("claim tasks of queue %s: %w", queue, err)
		}
		if len(claimed) < len(ids) {
			// The rest were stale (cancelled, or taken by another replica): dropped, and
			// the slots they took are freed.
			l.releasePopped(bg, queue, limits, unclaimed(popped.Entries, claimed))
		}
		for _, t := range claimed {
			l.tel.Transition(ofStep(t, telemetry.Transition{TaskID: t.ID, Queue: queue, WorkerID: workerID,
				From: storage.StatusBuffered, To: storage.StatusExecuting, Attempt: t.Attempts, Eligible: t.ScheduledAt}))
			l.tel.TaskSpan("taskforge.claim", t.Traceparent, taskAttrs(t, workerID)...)
		}
		if out == nil {
			out = claimed // ours alone: no copy of its tasks
		} else {
			out = append(out, claimed...)
		}
		if popped.RetryAfter > 0 {
			retryAfter = popped.RetryAfter
			break
		}
	}
	if len(acks) > 0 {
		// want was 0 (or every pop gave only stale ids): nothing carried the acks.
		if err := ackAlone(); err != nil {
			return out, nil, 0, err
		}
	}
	return out, acked, retryAfter, nil
}

// ClaimPush is Claim for a push queue's in-process worker (package push): it reads
// the queue's limits itself, and returns no tasks for a queue that does not exist or
// no longer pushes.
func (l *Lifecycle) ClaimPush(ctx context.Context, workerID, queue string, want int, lease time.Duration) ([]storage.Task, time.Duration, error) {
	limits, ok, err := l.limits.Get(ctx, queue)
	if err != nil {
		return nil, 0, fmt.Errorf("settings of queue %s: %w", queue, err)
	}
	if !ok || !limits.Push {
		return nil, 0, nil
	}
	return l.Claim(ctx, workerID, queue, limits, want, lease)
}

// ReleaseUnread releases tasks claimed for a poll whose worker went away before the
// answer reached it, so they need not wait out their lease. A task that cannot be
// released waits out its lease, as it would have anyway.
func (l *Lifecycle) ReleaseUnread(ctx context.Context, workerID string, tasks []storage.Task) {
	for _, t := range tasks {
		released, err := l.store.Release(ctx, storage.Release{TaskID: t.ID, LeaseToken: *t.LeaseToken, WorkerID: workerID,
			Reason: "worker " + workerID + " hung up before the poll's answer reached it; released for another worker"})
		if err != nil {
			l.log.Warn("task claimed for a poll whose worker hung up not released; it retries when its lease expires",
				"task_id", t.ID, "worker_id", workerID, "err", err)
			continue
		}
		l.released(ctx, released, workerID)
	}
}

func taskAttrs(t storage.Task, workerID string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attribute.String("taskforge.task_id", t.ID.String()), attribute.String("taskforge.queue", t.Queue),
		attribute.String("taskforge.worker_id", workerID), attribute.Int("taskforge.attempt", t.Attempts)}
	if t.WorkflowID != nil && t.Step != nil {
		attrs = append(attrs, attribute.String("taskforge.workflow_id", t.WorkflowID.String()), attribute.String("taskforge.step", *t.Step))
	}
	return attrs
}

// unclaimed returns the entries of popped whose task is not among claimed.
func unclaimed(popped []buffer.FairEntry, claimed []storage.Task) []buffer.FairEntry {
	got := make(map[uuid.UUID]bool, len(claimed))
	for _, t := range claimed {
		got[t.ID] = true
	}
	var out []buffer.FairEntry
	for _, e := range popped {
		if !got[e.ID] {
			out = append(out, e)
		}
	}
	return out
}

// pop takes up to n ids of queue from its buffer within its limits: from the plain
// buffer (buffer.Pop), or by group from a fair queue's (buffer.FairPop), counting
// the groups the fair pop set aside. Plain entries carry no group.
func (l *Lifecycle) pop(ctx context.Context, queue string, n int, limits ratelimit.Limits) (buffer.FairPopped, error) {
	if limits.Fair {
		p, err := l.buf.FairPop(ctx, queue, n, limits, groupLimits(limits))
		if err == nil {
			l.tel.GroupThrottled(queue, p.CapParked, p.RateParked)
		}
		return p, err
	}
	p, err := l.buf.Pop(ctx, queue, n, limits)
	if err != nil {
		return buffer.FairPopped{}, err
	}
	out := buffer.FairPopped{RetryAfter: p.RetryAfter, Paused: p.Paused, RedisTimeUs: p.RedisTimeUs,
		Remaining: p.Remaining, NeedSync: p.NeedSync, AtCap: p.AtCap}
	if len(p.Entries) > 0 {
		out.Entries = make([]buffer.FairEntry, len(p.Entries))
		for i, e := range p.Entries {
			out.Entries[i] = buffer.FairEntry{Entry: e}
		}
	}
	return out, nil
}

// groupLimits are a fair queue's group defaults as the fair pop takes them.
func groupLimits(limits ratelimit.Limits) buffer.GroupLimits {
	return buffer.GroupLimits{MaxConcurrency: limits.GroupMaxConcurrency, Rate: limits.GroupRate, Burst: limits.GroupBurst}
}

// syncSlots rebuilds queue's slots from the tasks PostgreSQL shows executing: the
// queue's, and in a fair queue each group's too.
func (l *Lifecycle) syncSlots(ctx context.Context, queue string, limits ratelimit.Limits) error {
	if limits.Fair {
		return l.buf.SyncGroupSlots(ctx, l.store, queue)
	}
	return l.buf.SyncSlots(ctx, l.store, queue)
}

// putback returns popped entries to queue's buffer (a fair queue's: to their
// groups').
func (l *Lifecycle) putback(ctx context.Context, queue string, limits ratelimit.Limits, entries []buffer.FairEntry) error {
	if limits.Fair {
		return l.buf.PutbackGrouped(ctx, queue, entries, buffer.LevelWeightMs(limits.AgingMs))
	}
	plain := make([]buffer.Entry, len(entries))
	for i, e := range entries {
		plain[i] = e.Entry
	}
	return l.buf.Putback(ctx, queue, plain)
}

// releasePopped frees the slots that popped entries took and that no claim holds.
func (l *Lifecycle) releasePopped(ctx context.Context, queue string, limits ratelimit.Limits, entries []buffer.FairEntry) {
	if limits.Fair {
		slots := make([]buffer.GroupSlot, len(entries))
		for i, e := range entries {
			slots[i] = buffer.GroupSlot{Group: e.Group, ID: e.ID}
		}
		l.releaseGroups(ctx, queue, slots...)
		return
	}
	ids := make([]uuid.UUID, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	l.releaseIfCapped(ctx, limits, queue, ids...)
}
