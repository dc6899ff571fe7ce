package api

import (
	"context"
	"fmt"
	"sync"

	"github.com/taskforge/taskforge/storage"
)

// maxAckBatch bounds how many acks one commit carries.
const maxAckBatch = 500

// pendingAck is one ack waiting for the group commit.
type pendingAck struct {
	item storage.AckItem
	done chan ackOutcome
}

// ackOutcome is an ack's result: the done task, or an error (storage.ErrLeaseLost
// when the lease was not held).
type ackOutcome struct {
	task storage.Task
	err  error
}

// ackCommitter gives concurrent acks one shared transaction, the way River's batch
// completer does, without a timer or a background goroutine: the first caller to
// find no commit running becomes the committer and commits everything queued, batch
// after batch, until the queue is empty; acks arriving meanwhile join the next batch.
// Under load, batches grow to fill the commit time; when idle, an ack commits alone
// at once.
type ackCommitter struct {
	store *storage.Store

	mu         sync.Mutex
	pending    []pendingAck
	committing bool
}

func newAckCommitter(store *storage.Store) *ackCommitter {
	return &ackCommitter{store: store}
}

// ack commits items (with whatever else is queued) and returns each item's outcome.
// Once submitted, acks are committed even if ctx ends, so an answer is never a guess.
func (a *ackCommitter) ack(ctx context.Context, items ...storage.AckItem) []ackOutcome {
	reqs := make([]pendingAck, len(items))
	a.mu.Lock()
	for i, it := range items {
		reqs[i] = pendingAck{item: it, done: make(chan ackOutcome, 1)}
		a.pending = append(a.pending, reqs[i])
	}
	lead := !a.committing
	a.committing = true
	a.mu.Unlock()

	if lead {
		a.commitAll(context.WithoutCancel(ctx))
	}
	out := make([]ackOutcome, len(items))
	for i, r := range reqs {
		out[i] = <-r.done
	}
	return out
}

// commitAll commits queued acks until none are left, then steps down.
func (a *ackCommitter) commitAll(ctx context.Context) {
	for {
		a.mu.Lock()
		n := min(len(a.pending), maxAckBatch)
		if n == 0 {
			a.committing = false
			a.mu.Unlock()
			return
		}
		batch := a.pending[:n:n]
		a.pending = a.pending[n:]
		a.mu.Unlock()
		a.commit(ctx, batch)
	}
}

func (a *ackCommitter) commit(ctx context.Context, batch []pendingAck) {
	items := make([]storage.AckItem, len(batch))
	for i, r := range batch {
		items[i] = r.item
	}
	acked, err := a.store.AckMany(ctx, items)
	for _, r := range batch {
		t, ok := acked[r.item.TaskID]
		switch {
		case err != nil:
			r.done <- ackOutcome{err: err}
		case ok && t.LeaseToken != nil && *t.LeaseToken == r.item.LeaseToken:
			// Only the first of duplicate acks in one batch wins, as if they had
			// been committed one after the other.
			delete(acked, r.item.TaskID)
			r.done <- ackOutcome{task: t}
		default:
			r.done <- ackOutcome{err: fmt.Errorf("ack task %s: %w", r.item.TaskID, storage.ErrLeaseLost)}
		}
	}
}
