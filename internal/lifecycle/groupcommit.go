package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Errors a group commit answers its callers with when the batch fails as a whole;
// the API maps them to its error codes (api/errors.go).
var (
	// ErrCommitTimeout means a try did not finish within its deadline. Whether it
	// took effect is unknown: pgx drops the connection and asks PostgreSQL to cancel
	// the statement, but it may have committed just before.
	ErrCommitTimeout = errors.New("group commit timed out")
	// ErrCommitOverloaded means too many items were already waiting; nothing was tried.
	ErrCommitOverloaded = errors.New("group commit queue full")
	// ErrCommitPanicked means the batch's function panicked. A panic before its
	// statement changed nothing; one after it leaves what the statement committed.
	ErrCommitPanicked = errors.New("group commit panicked")
)

// Retries of a try that failed before anything reached PostgreSQL.
const (
	commitTries      = 3
	commitRetryPause = 10 * time.Millisecond // times the try number
)

// groupCommit gives concurrent requests one shared statement, the way River's batch
// completer does, without a timer or a background goroutine: the first caller to
// find no commit running becomes the committer and commits the queue batch by batch.
// Requests arriving meanwhile join the next batch, so under load batches grow to fill
// the commit time, and when idle a request commits alone at once.
//
// Its guarantees:
//   - Each try runs under a deadline (timeout); a try that exceeds it fails its
//     batch's callers with ErrCommitTimeout instead of holding them.
//   - A panic in commit fails that batch's callers with ErrCommitPanicked; the
//     committer goes on with the next batch.
//   - At most limit callers wait (the running batch aside); beyond, do fails at
//     once with ErrCommitOverloaded. Callers, not items: a batch ack of 50 is one
//     request, and a hundred of them arriving together are a tenth of a second of
//     commits, not an overload.
//   - A committer serves only until its own items are answered, then hands the
//     queue to a waiting caller: since the queue is FIFO, every batch it commits
//     holds work queued before its own, so it never waits for others' work longer
//     than it would have anyway.
//
// Once submitted, an item is tried even if its caller hangs up, so the answer is
// never a guess.
type groupCommit[I, O any] struct {
	name    string        // "ack" or "claim": metrics, logs and errors
	max     int           // items per batch, unless one caller brings more
	limit   int           // callers that may wait for a batch
	timeout time.Duration // bound of one try
	// commit commits items in one statement and returns one outcome per item, in
	// order, or the error that failed them all. It must return soon after ctx ends.
	commit func(ctx context.Context, items []I) ([]O, error)
	tel    *telemetry.Telemetry
	log    *slog.Logger
	hooks  atomic.Pointer[commitHooks] // set only by tests

	mu         sync.Mutex
	pending    []waiting[I, O]
	callers    int           // callers with items in pending
	committing bool          // a caller is committing, or has been handed the queue
	lead       chan struct{} // holds the queue while it passes between callers
}

// commitHooks let tests see and steer a group commit (hooks.go).
type commitHooks struct {
	// queued runs after a caller's items joined the queue, with the callers waiting.
	queued func(waiting int)
	// try runs at the start of each try, inside its deadline and panic guard.
	try func(ctx context.Context, items int)
}

type waiting[I, O any] struct {
	item  I
	first bool                 // the first item of its caller: a batch may end before it
	done  chan commitResult[O] // buffered: the committer never blocks on it
}

type commitResult[O any] struct {
	out O
	err error
}

// newGroupCommit returns a group commit of batches of up to max items, with up to
// limit callers waiting and each try bounded by timeout.
func newGroupCommit[I, O any](name string, max, limit int, timeout time.Duration, tel *telemetry.Telemetry, log *slog.Logger,
	commit func(ctx context.Context, items []I) ([]O, error)) *groupCommit[I, O] {
	return &groupCommit[I, O]{name: name, max: max, limit: limit, timeout: timeout, commit: commit, tel: tel, log: log,
		lead: make(chan struct{}, 1)}
}

// do commits items (with whatever else is queued) and returns their outcomes, or
// the error that failed their batch: ErrCommitOverloaded (nothing was tried),
// ErrCommitTimeout (the outcome is unknown), ErrCommitPanicked, or the statement's
// error. ctx's values reach the statement; its cancellation does not.
func (g *groupCommit[I, O]) do(ctx context.Context, items ...I) ([]O, error) {
	ws := make([]waiting[I, O], len(items))
	g.mu.Lock()
	if g.callers >= g.limit {
		g.mu.Unlock()
		g.tel.GroupCommitFailed(g.name, "overload")
		return nil, fmt.Errorf("%s: %d requests already waiting: %w", g.name, g.limit, ErrCommitOverloaded)
	}
	for i, it := range items {
		ws[i] = waiting[I, O]{item: it, first: i == 0, done: make(chan commitResult[O], 1)}
		g.pending = append(g.pending, ws[i])
	}
	g.callers++
	lead := !g.committing
	g.committing = true
	queued := g.callers
	g.mu.Unlock()
	if h := g.hooks.Load(); h != nil && h.queued != nil {
		h.queued(queued)
	}

	base := context.WithoutCancel(ctx)
	if lead {
		g.serve(base, ws)
	}
	out := make([]O, len(items))
	var err error
	for i := range ws {
		var r commitResult[O]
		select {
		case r = <-ws[i].done: // answered: leave a handed-off queue to others
		default:
			select {
			case r = <-ws[i].done:
			case <-g.lead:
				g.serve(base, ws[i:])
				r = <-ws[i].done // serve returns once ws[i:] are answered
			}
		}
		out[i] = r.out
		if r.err != nil && err == nil {
			err = r.err
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// serve commits batches until own are all answered, then steps down when the queue
// is empty or hands it to a waiting caller. Some caller with items queued is always
// waiting on g.lead, so the hand-off is always taken.
func (g *groupCommit[I, O]) serve(ctx context.Context, own []waiting[I, O]) {
	for {
		g.mu.Lock()
		n := min(len(g.pending), g.max)
		for n < len(g.pending) && !g.pending[n].first {
			n++ // one caller's items share a batch: they succeed or fail together
		}
		switch {
		case n == 0:
			g.committing = false
			g.mu.Unlock()
			return
		case answered(own):
			g.mu.Unlock()
			g.lead <- struct{}{} // never blocks: only the committer sends, and only once
			return
		}
		batch := g.pending[:n:n]
		g.pending = g.pending[n:]
		for _, w := range batch {
			if w.first {
				g.callers--
			}
		}
		g.mu.Unlock()
		g.run(ctx, batch)
	}
}

// answered reports whether every item of ws has its answer waiting.
func answered[I, O any](ws []waiting[I, O]) bool {
	for _, w := range ws {
		if len(w.done) == 0 {
			return false
		}
	}
	return true
}

// run commits one batch and answers each of its callers.
func (g *groupCommit[I, O]) run(ctx context.Context, batch []waiting[I, O]) {
	items := make([]I, len(batch))
	for i, w := range batch {
		items[i] = w.item
	}
	out, err := g.tries(ctx, items)
	for i, w := range batch {
		if err != nil {
			w.done <- commitResult[O]{err: err}
		} else {
			w.done <- commitResult[O]{out: out[i]}
		}
	}
}

// tries runs the batch's tries, retrying only a try that failed before anything
// reached PostgreSQL. A try that timed out is never retried: it may have been
// committed all the same (pgx cancels the statement, but the cancel can arrive
// after the commit), and neither statement tolerates a repeat. A repeated ack finds its
// task done rather than executing and would answer lease_lost for an ack that
// succeeded; a repeated claim finds its tasks executing and would drop them, leased
// to a worker that never learns the token. The caller gets a 503 instead, and the
// ambiguity is its to resolve (an SDK repeating an ack may get 409 for a task that
// is done).
func (g *groupCommit[I, O]) tries(ctx context.Context, items []I) ([]O, error) {
	for try := 1; ; try++ {
		out, err := g.try(ctx, items)
		if err == nil || try == commitTries || !neverSent(err) {
			return out, err
		}
		time.Sleep(time.Duration(try) * commitRetryPause)
	}
}

// neverSent reports whether err certainly happened before the statement reached
// PostgreSQL (no connection could be made, or the write failed at once), so that
// trying again cannot apply it twice.
func neverSent(err error) bool {
	var connectErr *pgconn.ConnectError
	return !errors.Is(err, ErrCommitTimeout) && !errors.Is(err, ErrCommitPanicked) &&
		(errors.As(err, &connectErr) || pgconn.SafeToRetry(err))
}

// try runs commit once under the deadline, turning a panic into ErrCommitPanicked.
func (g *groupCommit[I, O]) try(ctx context.Context, items []I) (out []O, err error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			g.tel.GroupCommitFailed(g.name, "panic")
			g.log.Error("group commit panicked; its batch failed", "commit", g.name, "items", len(items),
				"panic", r, "stack", string(debug.Stack()))
			out, err = nil, fmt.Errorf("%s of %d items: %v: %w", g.name, len(items), r, ErrCommitPanicked)
		}
	}()
	if h := g.hooks.Load(); h != nil && h.try != nil {
		h.try(ctx, len(items))
	}
	out, err = g.commit(ctx, items)
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		g.tel.GroupCommitFailed(g.name, "timeout")
		return nil, fmt.Errorf("%s of %d items not done within %s (%w): %w", g.name, len(items), g.timeout, err, ErrCommitTimeout)
	case err == nil && len(out) != len(items):
		return nil, fmt.Errorf("%s: %d outcomes for %d items", g.name, len(out), len(items))
	}
	return out, err
}

// ackOutcome is an ack's result: the done task, or storage.ErrLeaseLost when the
// lease was not held.
type ackOutcome struct {
	task storage.Task
	err  error
}

// newAckCommit group-commits acks (up to 500 per statement) through
// store.AckMany, reading back only refs when refs says so.
func newAckCommit(store TaskStore, refs bool, limit int, timeout time.Duration, tel *telemetry.Telemetry,
	log *slog.Logger) *groupCommit[storage.AckItem, ackOutcome] {
	return newGroupCommit("ack", 500, limit, timeout, tel, log, func(ctx context.Context, items []storage.AckItem) ([]ackOutcome, error) {
		acked, err := store.AckMany(ctx, items, refs)
		if err != nil {
			return nil, err
		}
		return ackOutcomes(items, acked), nil
	})
}

// ackOutcomes are the outcomes of items, in order, given the tasks their
// statement acked. Only the first of duplicate acks in one batch wins, as if they
// had been committed one after the other.
func ackOutcomes(items []storage.AckItem, acked map[uuid.UUID]storage.Task) []ackOutcome {
	out := make([]ackOutcome, len(items))
	for i, it := range items {
		t, ok := acked[it.TaskID]
		if ok && t.LeaseToken != nil && *t.LeaseToken == it.LeaseToken {
			delete(acked, it.TaskID)
			out[i].task = t
			continue
		}
		out[i].err = fmt.Errorf("ack task %s: %w", it.TaskID, storage.ErrLeaseLost)
	}
	return out
}

// claimRequest is one poll's claim: popped ids for one worker, with a lease of
// the given length (0: the default).
type claimRequest struct {
	ids      []uuid.UUID
	workerID string
	lease    time.Duration
}

// newClaimCommit group-commits the claims of concurrent polls (up to 100 polls per
// statement), so workers polling one task at a time still share commits. Each
// outcome is the tasks its poll won, in the order of its ids. Requests asking for
// another lease than the default (pushers, whose lease covers their request's
// timeout) share a statement with those asking for the same.
func newClaimCommit(store TaskStore, lease time.Duration, limit int, timeout time.Duration, tel *telemetry.Telemetry,
	log *slog.Logger) *groupCommit[claimRequest, []storage.Task] {
	return newGroupCommit("claim", 100, limit, timeout, tel, log, func(ctx context.Context, reqs []claimRequest) ([][]storage.Task, error) {
		byLease := map[time.Duration][]storage.ClaimItem{}
		for _, r := range reqs {
			l := cmp.Or(r.lease, lease)
			for _, id := range r.ids {
				byLease[l] = append(byLease[l], storage.ClaimItem{TaskID: id, WorkerID: r.workerID})
			}
		}
		claimed := map[uuid.UUID]storage.Task{}
		for l, items := range byLease {
			won, err := store.ClaimMany(ctx, items, l)
			if err != nil {
				return nil, err
			}
			maps.Copy(claimed, won)
		}
		return claimOutcomes(reqs, claimed), nil
	})
}

// claimOutcomes are the tasks each of reqs won, in the order of its ids, given
// the tasks their statement claimed. An id popped twice (a stale duplicate) goes
// to one request only.
func claimOutcomes(reqs []claimRequest, claimed map[uuid.UUID]storage.Task) [][]storage.Task {
	out := make([][]storage.Task, len(reqs))
	for i, r := range reqs {
		out[i] = make([]storage.Task, 0, len(r.ids)) // a task is large: copy it once
		for _, id := range r.ids {
			if t, ok := claimed[id]; ok && t.ClaimedBy != nil && *t.ClaimedBy == r.workerID {
				out[i] = append(out[i], t)
				delete(claimed, id)
			}
		}
	}
	return out
}

// ackClaimRequest is one poll's acks and claim, committed together.
type ackClaimRequest struct {
	acks  []storage.AckItem // every token a storage.PlainLeaseToken
	claim claimRequest      // lease 0: the default
}

// ackClaimOutcome is an ackClaimRequest's outcome: one per ack, and the tasks won.
type ackClaimOutcome struct {
	acks   []ackOutcome
	claims []storage.Task
}

// newAckClaimCommit group-commits the acks and claims of concurrent polls that
// carry acks (up to 100 polls per transaction), each batch in one transaction
// (storage.Store.AckAndClaim): such a poll waits for one commit instead of the
// ack's and then the claim's.
func newAckClaimCommit(store TaskStore, lease time.Duration, limit int, timeout time.Duration, tel *telemetry.Telemetry,
	log *slog.Logger) *groupCommit[ackClaimRequest, ackClaimOutcome] {
	return newGroupCommit("ack+claim", 100, limit, timeout, tel, log, func(ctx context.Context, reqs []ackClaimRequest) ([]ackClaimOutcome, error) {
		var acks []storage.AckItem
		var claims []storage.ClaimItem
		claimReqs := make([]claimRequest, len(reqs))
		for i, r := range reqs {
			acks = append(acks, r.acks...)
			for _, id := range r.claim.ids {
				claims = append(claims, storage.ClaimItem{TaskID: id, WorkerID: r.claim.workerID})
			}
			claimReqs[i] = r.claim
		}
		acked, claimed, err := store.AckAndClaim(ctx, acks, claims, lease)
		if err != nil {
			return nil, err
		}
		ackOuts, won := ackOutcomes(acks, acked), claimOutcomes(claimReqs, claimed)
		out := make([]ackClaimOutcome, len(reqs))
		for i, r := range reqs {
			out[i] = ackClaimOutcome{acks: ackOuts[:len(r.acks):len(r.acks)], claims: won[i]}
			ackOuts = ackOuts[len(r.acks):]
		}
		return out, nil
	})
}
