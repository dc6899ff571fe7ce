package api

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
)

// groupCommit gives concurrent requests one shared transaction, the way River's
// batch completer does, without a timer or a background goroutine: the first caller
// to find no commit running becomes the committer and commits everything queued,
// batch after batch, until the queue is empty; requests arriving meanwhile join the
// next batch. Under load, batches grow to fill the commit time; when idle, a request
// commits alone at once. Once submitted, an item is committed even if its caller
// hangs up, so the answer is never a guess.
type groupCommit[I, O any] struct {
	max    int
	commit func(ctx context.Context, items []I) []O // one outcome per item, in order

	mu         sync.Mutex
	pending    []waiting[I, O]
	committing bool
}

type waiting[I, O any] struct {
	item I
	done chan O
}

// do commits items (with whatever else is queued) and returns their outcomes.
func (g *groupCommit[I, O]) do(ctx context.Context, items ...I) []O {
	ws := make([]waiting[I, O], len(items))
	g.mu.Lock()
	for i, it := range items {
		ws[i] = waiting[I, O]{item: it, done: make(chan O, 1)}
		g.pending = append(g.pending, ws[i])
	}
	lead := !g.committing
	g.committing = true
	g.mu.Unlock()

	if lead {
		g.commitAll(context.WithoutCancel(ctx))
	}
	out := make([]O, len(items))
	for i, w := range ws {
		out[i] = <-w.done
	}
	return out
}

// commitAll commits queued items until none are left, then steps down.
func (g *groupCommit[I, O]) commitAll(ctx context.Context) {
	for {
		g.mu.Lock()
		n := min(len(g.pending), g.max)
		if n == 0 {
			g.committing = false
			g.mu.Unlock()
			return
		}
		batch := g.pending[:n:n]
		g.pending = g.pending[n:]
		g.mu.Unlock()

		items := make([]I, n)
		for i, w := range batch {
			items[i] = w.item
		}
		for i, o := range g.commit(ctx, items) {
			batch[i].done <- o
		}
	}
}

// ackOutcome is an ack's result: the done task, or an error (storage.ErrLeaseLost
// when the lease was not held).
type ackOutcome struct {
	task storage.Task
	err  error
}

// newAckCommit group-commits acks (up to 500 per statement).
func newAckCommit(store *storage.Store) *groupCommit[storage.AckItem, ackOutcome] {
	return &groupCommit[storage.AckItem, ackOutcome]{max: 500, commit: func(ctx context.Context, items []storage.AckItem) []ackOutcome {
		out := make([]ackOutcome, len(items))
		acked, err := store.AckMany(ctx, items)
		for i, it := range items {
			t, ok := acked[it.TaskID]
			switch {
			case err != nil:
				out[i].err = err
			case ok && t.LeaseToken != nil && *t.LeaseToken == it.LeaseToken:
				// Only the first of duplicate acks in one batch wins, as if they
				// had been committed one after the other.
				delete(acked, it.TaskID)
				out[i].task = t
			default:
				out[i].err = fmt.Errorf("ack task %s: %w", it.TaskID, storage.ErrLeaseLost)
			}
		}
		return out
	}}
}

// claimRequest is one poll's claim: popped ids for one worker.
type claimRequest struct {
	ids      []uuid.UUID
	workerID string
}

// claimOutcome is the tasks a claim request won, in the order of its ids.
type claimOutcome struct {
	tasks []storage.Task
	err   error
}

// newClaimCommit group-commits the claims of concurrent polls (up to 1,000 ids per
// statement), so workers polling one task at a time still share commits.
func newClaimCommit(store *storage.Store, lease time.Duration) *groupCommit[claimRequest, claimOutcome] {
	return &groupCommit[claimRequest, claimOutcome]{max: 100, commit: func(ctx context.Context, reqs []claimRequest) []claimOutcome {
		var items []storage.ClaimItem
		for _, r := range reqs {
			for _, id := range r.ids {
				items = append(items, storage.ClaimItem{TaskID: id, WorkerID: r.workerID})
			}
		}
		out := make([]claimOutcome, len(reqs))
		claimed, err := store.ClaimMany(ctx, items, lease)
		for i, r := range reqs {
			if err != nil {
				out[i].err = err
				continue
			}
			for _, id := range r.ids {
				// An id popped twice (a stale duplicate) goes to one request only.
				if t, ok := claimed[id]; ok && t.ClaimedBy != nil && *t.ClaimedBy == r.workerID {
					out[i].tasks = append(out[i].tasks, t)
					delete(claimed, id)
				}
			}
		}
		return out
	}}
}
