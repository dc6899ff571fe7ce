package lifecycle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

// The tests of this file check the lifecycle's decisions, what a transition does
// after its statement, without PostgreSQL or Redis: the statement's answer comes
// from a fakeStore, and the follow-ups are recorded by a fakeBroker.

// fakeStore answers the statements a test sets a function for; the Store methods
// a test does not expect panic through the nil embedded interface.
type fakeStore struct {
	Store
	reclaim   func(limit int) ([]storage.Reclaimed, error)
	ackMany   func(items []storage.AckItem) (map[uuid.UUID]storage.Task, error)
	claimMany func(items []storage.ClaimItem) (map[uuid.UUID]storage.Task, error)
	nack      func(n storage.Nack) (storage.Task, error)
	ackClaim  func(acks []storage.AckItem, claims []storage.ClaimItem) (acked, claimed map[uuid.UUID]storage.Task, err error)
	enqueue   func(queue string, tasks []storage.NewTask, opts storage.EnqueueOptions) ([]storage.Enqueued, error)
}

func (s *fakeStore) ReclaimExpired(_ context.Context, limit int) ([]storage.Reclaimed, error) {
	return s.reclaim(limit)
}

func (s *fakeStore) AckMany(_ context.Context, items []storage.AckItem, _ bool) (map[uuid.UUID]storage.Task, error) {
	return s.ackMany(items)
}

func (s *fakeStore) ClaimMany(_ context.Context, items []storage.ClaimItem, _ time.Duration) (map[uuid.UUID]storage.Task, error) {
	return s.claimMany(items)
}

func (s *fakeStore) Nack(_ context.Context, n storage.Nack) (storage.Task, error) { return s.nack(n) }

func (s *fakeStore) AckAndClaim(_ context.Context, acks []storage.AckItem, claims []storage.ClaimItem, _ time.Duration) (acked, claimed map[uuid.UUID]storage.Task, err error) {
	return s.ackClaim(acks, claims)
}

func (s *fakeStore) EnqueueWith(_ context.Context, queue string, tasks []storage.NewTask, opts storage.EnqueueOptions) ([]storage.Enqueued, error) {
	return s.enqueue(queue, tasks, opts)
}

// fakeBroker records the follow-ups a transition sends to Redis and answers the
// reads and pops a test sets; the Broker methods a test does not expect panic
// through the nil embedded interface.
type fakeBroker struct {
	Broker
	mu        sync.Mutex
	released  map[string][]uuid.UUID
	removed   map[string][]uuid.UUID
	published []uuid.UUID
	// groupReleased: "queue/group" -> ids freed by ReleaseGroup (fair queues).
	groupReleased map[string][]uuid.UUID
	// added: queue -> ids added by Add; "queue/group" -> ids added by AddGrouped.
	added map[string][]uuid.UUID
	// putback: queue -> ids given back by Putback or PutbackGrouped.
	putback map[string][]uuid.UUID

	sizes      map[string]int64 // Sizes' answer
	groupSizes map[string]int64 // GroupSizes' answer, by group
	pops       []buffer.FairPopped
}

// note records ids under key of m (one of f's maps).
func (f *fakeBroker) note(m map[string][]uuid.UUID, key string, ids ...uuid.UUID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m[key] = append(m[key], ids...)
	return nil
}

// idsOf returns the id of each of xs.
func idsOf[T any](xs []T, id func(T) uuid.UUID) []uuid.UUID {
	out := make([]uuid.UUID, len(xs))
	for i, x := range xs {
		out[i] = id(x)
	}
	return out
}

func newFakeBroker() *fakeBroker {
	return &fakeBroker{released: map[string][]uuid.UUID{}, removed: map[string][]uuid.UUID{},
		groupReleased: map[string][]uuid.UUID{}, added: map[string][]uuid.UUID{}, putback: map[string][]uuid.UUID{}}
}

func (f *fakeBroker) ReleaseGroup(_ context.Context, queue, group string, ids ...uuid.UUID) error {
	return f.note(f.groupReleased, queue+"/"+group, ids...)
}

func (f *fakeBroker) Release(_ context.Context, queue string, ids ...uuid.UUID) error {
	return f.note(f.released, queue, ids...)
}

func (f *fakeBroker) Remove(_ context.Context, queue string, ids ...uuid.UUID) error {
	return f.note(f.removed, queue, ids...)
}

func (f *fakeBroker) PublishDone(_ context.Context, ids ...uuid.UUID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, ids...)
	return nil
}

func (f *fakeBroker) Add(_ context.Context, queue string, tasks []storage.Buffered, _ int64) error {
	return f.note(f.added, queue, idsOf(tasks, func(t storage.Buffered) uuid.UUID { return t.ID })...)
}

func (f *fakeBroker) AddGrouped(_ context.Context, queue string, tasks []buffer.GroupedTask, _ int64) error {
	for _, t := range tasks {
		_ = f.note(f.added, queue+"/"+t.Group, t.ID)
	}
	return nil
}

func (f *fakeBroker) Sizes(_ context.Context, queues []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, q := range queues {
		out[q] = f.sizes[q]
	}
	return out, nil
}

func (f *fakeBroker) GroupSizes(_ context.Context, _ string, groups []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, g := range groups {
		out[g] = f.groupSizes[g]
	}
	return out, nil
}

// pop hands out the pops the test set, one per call, then empty ones.
func (f *fakeBroker) pop() buffer.FairPopped {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pops) == 0 {
		return buffer.FairPopped{}
	}
	p := f.pops[0]
	f.pops = f.pops[1:]
	return p
}

func (f *fakeBroker) Pop(context.Context, string, int, ratelimit.Limits) (buffer.Popped, error) {
	p := f.pop()
	out := buffer.Popped{Remaining: p.Remaining, AtCap: p.AtCap, Paused: p.Paused, RetryAfter: p.RetryAfter}
	for _, e := range p.Entries {
		out.Entries = append(out.Entries, e.Entry)
	}
	return out, nil
}

func (f *fakeBroker) FairPop(context.Context, string, int, ratelimit.Limits, buffer.GroupLimits) (buffer.FairPopped, error) {
	return f.pop(), nil
}

func (f *fakeBroker) Putback(_ context.Context, queue string, entries []buffer.Entry) error {
	return f.note(f.putback, queue, idsOf(entries, func(e buffer.Entry) uuid.UUID { return e.ID })...)
}

func (f *fakeBroker) PutbackGrouped(_ context.Context, queue string, entries []buffer.FairEntry, _ int64) error {
	return f.note(f.putback, queue, idsOf(entries, func(e buffer.FairEntry) uuid.UUID { return e.ID })...)
}

// RecordingWaker records what the transitions tell the dispatcher (the package's
// external tests use it too).
type RecordingWaker struct {
	mu       sync.Mutex
	due, low []string
}

// Wake records that queue has work due.
func (w *RecordingWaker) Wake(queue string) { w.record(&w.due, queue) }

// WakeLow records that queue's buffer ran low.
func (w *RecordingWaker) WakeLow(queue string) { w.record(&w.low, queue) }

func (w *RecordingWaker) record(to *[]string, queue string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	*to = append(*to, queue)
}

// Woken returns the queues told of so far, in order: with work due, and low.
func (w *RecordingWaker) Woken() (due, low []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.due), slices.Clone(w.low)
}

// dueQueues returns the queues w was told have work due, sorted, each once.
func dueQueues(w *RecordingWaker) []string {
	due, _ := w.Woken()
	slices.Sort(due)
	return slices.Compact(due)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// The queues of the fake lifecycles: their settings are set, so a lifecycle never
// reads them from a store.
var (
	one, fairness = 1, storage.FairnessRoundRobin
	capped        = storage.Queue{Name: "capped", MaxConcurrency: &one}
	uncapped      = storage.Queue{Name: "uncapped"}
	fairQ         = storage.Queue{Name: "fair", Fairness: &fairness}
	pausedQ       = storage.Queue{Name: "paused", Paused: true}
)

// fakeLifecycle is a Lifecycle on store and broker that knows the settings of
// queues, tells w of work due, and is tuned by cfg.
func fakeLifecycle(store Store, broker Broker, w Waker, cfg Config, queues ...storage.Queue) *Lifecycle {
	limits := ratelimit.NewSettings(nil, quiet) // every queue set: it never reads a store
	for _, q := range queues {
		limits.Set(q)
	}
	return newLifecycle(store, broker, limits, w, cfg, quiet)
}

// TestReclaimFollowUps: without PostgreSQL or Redis, what a reclaim does after its
// statement: every queue with a reclaimed task is handed to the dispatcher, every
// lost attempt's slot is freed, the tasks that ended (dead, cancelled) and only
// those are announced to the waiters of every replica and of this one, and a
// workflow step's cascade drops the steps it cancelled from their buffers. In a fair
// queue, the lost attempt's queue and group slots are freed together.
func TestReclaimFollowUps(t *testing.T) {
	retry, dead, cancelled, sibling := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	fairA, fairUnnamed, tenant := uuid.New(), uuid.New(), "tenant-a"
	wf, step, sibStep := uuid.New(), "a", "b"
	now := time.Now()
	rows := []storage.Reclaimed{
		{TaskID: retry, Queue: "q1", Attempt: 1, WorkerID: "w", Status: storage.StatusRetry, Outcome: "abandoned", StartedAt: now, EndedAt: now},
		{TaskID: dead, Queue: "q2", Attempt: 4, WorkerID: "w", Status: storage.StatusDead, Outcome: "timed_out", StartedAt: now, EndedAt: now,
			WorkflowID: &wf, Step: &step, Effects: &storage.StepEffects{WorkflowEnded: storage.WorkflowFailed,
				Cascaded: []storage.CancelledStep{{ID: sibling, Queue: "q3", Step: &sibStep, WorkflowID: &wf, FromStatus: storage.StatusBuffered}}}},
		{TaskID: cancelled, Queue: "q1", Attempt: 2, WorkerID: "w", Status: storage.StatusCancelled, Outcome: "cancelled", StartedAt: now, EndedAt: now},
		{TaskID: fairA, Queue: "fq", Attempt: 1, WorkerID: "w", Status: storage.StatusRetry, Outcome: "abandoned", StartedAt: now, EndedAt: now,
			Group: &tenant},
		{TaskID: fairUnnamed, Queue: "fq", Attempt: 1, WorkerID: "w", Status: storage.StatusRetry, Outcome: "abandoned", StartedAt: now, EndedAt: now},
	}
	store := &fakeStore{reclaim: func(int) ([]storage.Reclaimed, error) { return rows, nil }}
	broker := newFakeBroker()
	w := &RecordingWaker{}
	l := fakeLifecycle(store, broker, w, Config{},
		storage.Queue{Name: "q1", MaxConcurrency: &one}, storage.Queue{Name: "q2", MaxConcurrency: &one},
		storage.Queue{Name: "q3"}, storage.Queue{Name: "fq", Fairness: &fairness})
	endedDead, leave := l.AwaitEnd(dead)
	defer leave()
	endedRetry, leaveRetry := l.AwaitEnd(retry)
	defer leaveRetry()

	got, err := l.Reclaim(context.Background(), 10)
	if err != nil || len(got) != 5 {
		t.Fatalf("Reclaim: %d rows (%v), want 5", len(got), err)
	}
	if !slices.Equal(dueQueues(w), []string{"fq", "q1", "q2"}) {
		t.Errorf("dispatcher told of %v, want fq, q1 and q2", dueQueues(w))
	}
	if !slices.Equal(broker.groupReleased["fq/"+tenant], []uuid.UUID{fairA}) || !slices.Equal(broker.groupReleased["fq/"], []uuid.UUID{fairUnnamed}) ||
		len(broker.groupReleased) != 2 || len(broker.released["fq"]) != 0 {
		t.Errorf("fair queue's slots freed: by group %v, plain %v; want %s's and the unnamed group's by group", broker.groupReleased, broker.released["fq"], tenant)
	}
	if !slices.Equal(broker.released["q1"], []uuid.UUID{retry, cancelled}) || !slices.Equal(broker.released["q2"], []uuid.UUID{dead}) {
		t.Errorf("slots freed: %v, want q1: retry, cancelled; q2: dead", broker.released)
	}
	if !slices.Equal(broker.removed["q3"], []uuid.UUID{sibling}) {
		t.Errorf("buffer entries removed: %v, want the cascaded sibling from q3", broker.removed)
	}
	for _, id := range []uuid.UUID{dead, cancelled, sibling} {
		if !slices.Contains(broker.published, id) {
			t.Errorf("ended task %s not announced (announced %v)", id, broker.published)
		}
	}
	if slices.Contains(broker.published, retry) {
		t.Errorf("the retrying task was announced as ended")
	}
	select {
	case <-endedDead:
	default:
		t.Error("this replica's waiter of the dead task was not woken")
	}
	select {
	case <-endedRetry:
		t.Error("the waiter of the retrying task was woken")
	default:
	}
}

// TestAckFollowUps: what acks do once their statement committed: each acked task's
// slots are freed as its queue keeps them (a capped plain queue's slot, a fair
// queue's queue and group slots by group, nothing for an uncapped plain queue), each
// is announced ended to every replica and to this one's waiters, the steps an ack
// unblocked are handed to the dispatcher (WakeOnEnqueue), and an ack whose lease was
// lost gets storage.ErrLeaseLost and no follow-up at all.
func TestAckFollowUps(t *testing.T) {
	tenant, wf, step := "tenant-a", uuid.New(), "a"
	inCapped, inUncapped, inTenant, inUnnamed, lost, stepTask, unblocked :=
		uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	done := map[uuid.UUID]storage.Task{
		inCapped:   {ID: inCapped, Queue: "capped"},
		inUncapped: {ID: inUncapped, Queue: "uncapped"},
		inTenant:   {ID: inTenant, Queue: "fair", Group: &tenant},
		inUnnamed:  {ID: inUnnamed, Queue: "fair"},
		stepTask: {ID: stepTask, Queue: "uncapped", WorkflowID: &wf, Step: &step,
			Effects: &storage.StepEffects{Unblocked: []storage.UnblockedStep{{ID: unblocked, Queue: "next", Step: "b"}}}},
	}
	store := &fakeStore{ackMany: func(items []storage.AckItem) (map[uuid.UUID]storage.Task, error) {
		out := map[uuid.UUID]storage.Task{}
		for _, it := range items {
			if task, ok := done[it.TaskID]; ok {
				task.Status, task.LeaseToken = storage.StatusDone, &it.LeaseToken
				out[it.TaskID] = task
			}
		}
		return out, nil
	}}
	broker := newFakeBroker()
	w := &RecordingWaker{}
	l := fakeLifecycle(store, broker, w, Config{WakeOnEnqueue: true}, capped, uncapped, fairQ, storage.Queue{Name: "next"})
	endedCapped, leave := l.AwaitEnd(inCapped)
	defer leave()
	endedLost, leaveLost := l.AwaitEnd(lost)
	defer leaveLost()

	ids := []uuid.UUID{inCapped, inUncapped, inTenant, inUnnamed, lost, stepTask}
	items := make([]storage.AckItem, len(ids))
	for i, id := range ids {
		items[i] = storage.AckItem{TaskID: id, LeaseToken: uuid.New(), WorkerID: "w"}
	}
	out, err := l.AckMany(context.Background(), "w", items, true)
	if err != nil || len(out) != len(ids) {
		t.Fatalf("AckMany: %d outcomes (%v), want %d", len(out), err, len(ids))
	}
	for i, o := range out {
		if want := ids[i] == lost; errors.Is(o.Err, storage.ErrLeaseLost) != want || (o.Err == nil) == want {
			t.Errorf("outcome of ack %d: %v, lease lost: %v", i, o.Err, want)
		}
	}
	if !maps.EqualFunc(broker.released, map[string][]uuid.UUID{"capped": {inCapped}}, slices.Equal) {
		t.Errorf("plain slots freed: %v, want only the capped queue's task", broker.released)
	}
	if !maps.EqualFunc(broker.groupReleased, map[string][]uuid.UUID{"fair/" + tenant: {inTenant}, "fair/": {inUnnamed}}, slices.Equal) {
		t.Errorf("fair slots freed: %v, want each task's by its group", broker.groupReleased)
	}
	byID := func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) }
	if got, want := slices.SortedFunc(slices.Values(broker.published), byID),
		slices.SortedFunc(slices.Values([]uuid.UUID{inCapped, inUncapped, inTenant, inUnnamed, stepTask}), byID); !slices.Equal(got, want) {
		t.Errorf("announced %v, want every acked task and not the lost one", broker.published)
	}
	if !slices.Equal(dueQueues(w), []string{"next"}) {
		t.Errorf("dispatcher told of %v, want only the queue of the unblocked step", dueQueues(w))
	}
	select {
	case <-endedCapped:
	default:
		t.Error("this replica's waiter of an acked task was not woken")
	}
	select {
	case <-endedLost:
		t.Error("the waiter of the task whose lease was lost was woken")
	default:
	}
}

// TestNackFollowUps: a nack's follow-ups follow the status its statement chose: a
// retry is handed to the dispatcher and not announced; a dead or cancelled task is
// announced ended and not handed over; each frees the slot its attempt held.
func TestNackFollowUps(t *testing.T) {
	for _, status := range []string{storage.StatusRetry, storage.StatusDead, storage.StatusCancelled} {
		t.Run(status, func(t *testing.T) {
			id := uuid.New()
			store := &fakeStore{nack: func(n storage.Nack) (storage.Task, error) {
				return storage.Task{ID: n.TaskID, Queue: "capped", Status: status}, nil
			}}
			broker := newFakeBroker()
			w := &RecordingWaker{}
			l := fakeLifecycle(store, broker, w, Config{}, capped)
			ended, leave := l.AwaitEnd(id)
			defer leave()

			if _, err := l.Nack(context.Background(), storage.Nack{TaskID: id, LeaseToken: uuid.New(), WorkerID: "w"}); err != nil {
				t.Fatal(err)
			}
			retry := status == storage.StatusRetry
			if got := slices.Equal(dueQueues(w), []string{"capped"}); got != retry {
				t.Errorf("dispatcher told of %v; a retry must be, an ended task not", dueQueues(w))
			}
			if got := slices.Contains(broker.published, id); got == retry {
				t.Errorf("announced %v; an ended task must be, a retry not", broker.published)
			}
			select {
			case <-ended:
				if retry {
					t.Error("the waiter of a retrying task was woken")
				}
			default:
				if !retry {
					t.Error("the waiter of an ended task was not woken")
				}
			}
			if !slices.Equal(broker.released["capped"], []uuid.UUID{id}) {
				t.Errorf("slots freed: %v, want the attempt's", broker.released)
			}
		})
	}
}

// TestEnqueueBuffersDirectly: the enqueue's fast path asks PostgreSQL to commit the
// tasks as buffered only when they may skip the dispatcher (due now, the queue not
// paused, its buffer with room for them all; in a fair queue, every group of the
// tasks holding nothing buffered, whatever other groups hold), and adds to the
// buffer exactly the tasks the statement committed as buffered: PostgreSQL has the
// last word. Tasks left pending are the dispatcher's, told of them under
// WakeOnEnqueue.
func TestEnqueueBuffersDirectly(t *testing.T) {
	later := time.Now().Add(time.Hour)
	tenant, other := "tenant-a", "tenant-b"
	cases := []struct {
		name       string
		queue      string
		tasks      int
		at         *time.Time
		group      *string
		sizes      map[string]int64 // the plain buffers' sizes
		groupSizes map[string]int64 // the fair queue's group buffers' sizes
		refuse     bool             // the statement leaves them pending all the same
		want       bool             // the enqueue asks for buffered
	}{
		{name: "room", queue: "uncapped", tasks: 2, sizes: map[string]int64{"uncapped": 8}, want: true},
		{name: "no room", queue: "uncapped", tasks: 3, sizes: map[string]int64{"uncapped": 8}},
		{name: "too many", queue: "uncapped", tasks: maxBufferDirectly + 1},
		{name: "scheduled", queue: "uncapped", tasks: 1, at: &later},
		{name: "paused", queue: "paused", tasks: 1},
		{name: "postgres refuses", queue: "uncapped", tasks: 1, refuse: true, want: true},
		{name: "fair idle group", queue: "fair", tasks: 2, group: &tenant, groupSizes: map[string]int64{other: 500}, want: true},
		{name: "fair unnamed group", queue: "fair", tasks: 1, groupSizes: map[string]int64{tenant: 5}, want: true},
		{name: "fair busy group", queue: "fair", tasks: 1, group: &tenant, groupSizes: map[string]int64{tenant: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var asked []bool
			store := &fakeStore{enqueue: func(queue string, tasks []storage.NewTask, opts storage.EnqueueOptions) ([]storage.Enqueued, error) {
				asked = append(asked, opts.Buffered)
				out := make([]storage.Enqueued, len(tasks))
				for i, nt := range tasks {
					status := storage.StatusPending
					if opts.Buffered && !c.refuse {
						status = storage.StatusBuffered
					}
					out[i] = storage.Enqueued{Created: true, Task: storage.Task{ID: nt.ID, Queue: queue, Status: status, Group: nt.Group}}
				}
				return out, nil
			}}
			broker := newFakeBroker()
			broker.sizes, broker.groupSizes = c.sizes, c.groupSizes
			w := &RecordingWaker{}
			l := fakeLifecycle(store, broker, w, Config{BufferTarget: 10, WakeOnEnqueue: true}, uncapped, pausedQ, fairQ)
			tasks := make([]storage.NewTask, c.tasks)
			var ids []uuid.UUID
			for i := range tasks {
				tasks[i] = storage.NewTask{ID: uuid.New(), ScheduledAt: c.at, Group: c.group}
				ids = append(ids, tasks[i].ID)
			}
			if _, err := l.Enqueue(context.Background(), c.queue, tasks, false); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(asked, []bool{c.want}) {
				t.Fatalf("the statement was asked for buffered: %v, want %v", asked, c.want)
			}
			key := c.queue
			if c.queue == "fair" {
				key += "/" + groupOf(c.group)
			}
			buffered := c.want && !c.refuse
			var want map[string][]uuid.UUID
			if buffered {
				want = map[string][]uuid.UUID{key: ids}
			}
			if !maps.EqualFunc(broker.added, want, slices.Equal) {
				t.Errorf("added to the buffer: %v, want %v", counts(broker.added), counts(want))
			}
			if got := slices.Equal(dueQueues(w), []string{c.queue}); got == buffered {
				t.Errorf("dispatcher told of %v; only tasks left pending are its", dueQueues(w))
			}
		})
	}
}

// counts is how many ids each key of m holds, for a short failure message.
func counts(m map[string][]uuid.UUID) map[string]int {
	out := map[string]int{}
	for k, ids := range m {
		out[k] = len(ids)
	}
	return out
}

// TestClaimDropsWhatTheStoreNoLongerClaims: a claim whose pop found ids the store no
// longer claims (cancelled, or claimed by another replica) keeps them out of the
// buffer and frees the slots they took (a capped queue's; a fair queue's by group;
// none in an uncapped queue, which keeps none); a claim whose statement failed puts
// every popped id back and frees their slots; and a pop that left the buffer below
// LowWater asks the dispatcher for a refill.
func TestClaimDropsWhatTheStoreNoLongerClaims(t *testing.T) {
	tenant, other := "tenant-a", "tenant-b"
	cases := []struct {
		name  string
		queue storage.Queue
		fail  bool
		// want: the slots freed (queue or "queue/group" -> how many) and how many
		// ids were put back.
		freed   map[string]int
		putback int
	}{
		{name: "capped", queue: capped, freed: map[string]int{"capped": 2}},
		{name: "uncapped", queue: uncapped, freed: map[string]int{}},
		{name: "fair", queue: fairQ, freed: map[string]int{"fair/" + tenant: 1, "fair/" + other: 1}},
		{name: "capped, statement failed", queue: capped, fail: true, freed: map[string]int{"capped": 3}, putback: 3},
		{name: "fair, statement failed", queue: fairQ, fail: true, freed: map[string]int{"fair/" + tenant: 2, "fair/" + other: 1}, putback: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			won, stale, gone := uuid.New(), uuid.New(), uuid.New()
			store := &fakeStore{claimMany: func(items []storage.ClaimItem) (map[uuid.UUID]storage.Task, error) {
				if c.fail {
					return nil, errors.New("connection reset")
				}
				out := map[uuid.UUID]storage.Task{}
				for _, it := range items {
					if it.TaskID == won {
						out[won] = storage.Task{ID: won, Queue: c.queue.Name, Status: storage.StatusExecuting, ClaimedBy: &it.WorkerID}
					}
				}
				return out, nil
			}}
			broker := newFakeBroker()
			broker.pops = []buffer.FairPopped{{Remaining: 3, Entries: []buffer.FairEntry{
				{Entry: buffer.Entry{ID: won}, Group: tenant}, {Entry: buffer.Entry{ID: stale}, Group: tenant},
				{Entry: buffer.Entry{ID: gone}, Group: other}}}}
			if c.queue.Fairness == nil { // a plain pop carries no group
				for i := range broker.pops[0].Entries {
					broker.pops[0].Entries[i].Group = ""
				}
			}
			w := &RecordingWaker{}
			l := fakeLifecycle(store, broker, w, Config{LowWater: 10}, c.queue)
			limits, _, _ := l.limits.Get(context.Background(), c.queue.Name)

			got, _, err := l.Claim(context.Background(), "w", c.queue.Name, limits, 3, 0)
			if c.fail != (err != nil) {
				t.Fatalf("Claim: %v, want an error: %v", err, c.fail)
			}
			if !c.fail && (len(got) != 1 || got[0].ID != won) {
				t.Errorf("claimed %v, want only %s", got, won)
			}
			freed := map[string]int{}
			for q, ids := range broker.released {
				freed[q] += len(ids)
			}
			for k, ids := range broker.groupReleased {
				freed[k] += len(ids)
			}
			if !maps.Equal(freed, c.freed) {
				t.Errorf("slots freed: %v, want %v", freed, c.freed)
			}
			if n := len(broker.putback[c.queue.Name]); n != c.putback {
				t.Errorf("%d ids put back, want %d", n, c.putback)
			}
			if _, low := w.Woken(); !slices.Equal(low, []string{c.queue.Name}) {
				t.Errorf("refills asked: %v, want one of %s", low, c.queue.Name)
			}
		})
	}
}

// plainToken returns a lease token of a task outside a workflow
// (storage.PlainLeaseToken).
func plainToken() uuid.UUID {
	u := uuid.New()
	u[6] = u[6]&0x0f | 0x80
	return u
}

// TestClaimCarriesAcks: a poll's acks commit with its claim when the buffer holds
// work (one transaction), alone when it holds none, alone and before the pop when one
// of them is a workflow step's (its cascade runs in another statement), and when the
// queue was at its concurrency cap, alone and then the pop again, since the acks
// freed slots.
func TestClaimCarriesAcks(t *testing.T) {
	cases := []struct {
		name string
		pops []buffer.FairPopped
		step bool // the ack is a workflow step's
		// want: the statements run, in order, and whether the poll got its task.
		want    []string
		claimed bool
	}{
		{name: "buffered", pops: []buffer.FairPopped{{}}, want: []string{"ack+claim"}, claimed: true},
		{name: "empty", pops: []buffer.FairPopped{{}}, want: []string{"ack"}},
		{name: "at cap", pops: []buffer.FairPopped{{AtCap: true}, {}}, want: []string{"ack", "claim"}, claimed: true},
		{name: "workflow step", pops: []buffer.FairPopped{{}}, step: true, want: []string{"ack", "claim"}, claimed: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task, done := uuid.New(), uuid.New()
			var ran []string
			doneTasks := func(items []storage.AckItem) map[uuid.UUID]storage.Task {
				out := map[uuid.UUID]storage.Task{}
				for _, it := range items {
					out[it.TaskID] = storage.Task{ID: it.TaskID, Queue: "capped", Status: storage.StatusDone, LeaseToken: &it.LeaseToken}
				}
				return out
			}
			claimedTasks := func(items []storage.ClaimItem) map[uuid.UUID]storage.Task {
				out := map[uuid.UUID]storage.Task{}
				for _, it := range items {
					out[it.TaskID] = storage.Task{ID: it.TaskID, Queue: "capped", Status: storage.StatusExecuting, ClaimedBy: &it.WorkerID}
				}
				return out
			}
			store := &fakeStore{
				ackMany: func(items []storage.AckItem) (map[uuid.UUID]storage.Task, error) {
					ran = append(ran, "ack")
					return doneTasks(items), nil
				},
				claimMany: func(items []storage.ClaimItem) (map[uuid.UUID]storage.Task, error) {
					ran = append(ran, "claim")
					return claimedTasks(items), nil
				},
				ackClaim: func(acks []storage.AckItem, claims []storage.ClaimItem) (map[uuid.UUID]storage.Task, map[uuid.UUID]storage.Task, error) {
					ran = append(ran, "ack+claim")
					return doneTasks(acks), claimedTasks(claims), nil
				},
			}
			broker := newFakeBroker()
			broker.pops = c.pops
			if c.claimed { // the last pop finds the task
				broker.pops[len(broker.pops)-1].Entries = []buffer.FairEntry{{Entry: buffer.Entry{ID: task}}}
			}
			l := fakeLifecycle(store, broker, &RecordingWaker{}, Config{}, capped)
			limits, _, _ := l.limits.Get(context.Background(), "capped")
			token := plainToken()
			if c.step {
				token = uuid.New() // version 4: a workflow step's
			}

			got, acked, _, err := l.ClaimAcking(context.Background(), "w", "capped", limits, 1, 0,
				[]storage.AckItem{{TaskID: done, LeaseToken: token, WorkerID: "w"}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ran, c.want) {
				t.Errorf("statements run: %v, want %v", ran, c.want)
			}
			if len(acked) != 1 || acked[0].Err != nil || acked[0].Task.ID != done {
				t.Errorf("ack outcomes: %+v, want the task done", acked)
			}
			if c.claimed != (len(got) == 1 && got[0].ID == task) || !c.claimed && len(got) != 0 {
				t.Errorf("claimed %v, want the buffered task: %v", got, c.claimed)
			}
			if !slices.Contains(broker.published, done) || !slices.Contains(broker.released["capped"], done) {
				t.Errorf("the acked task was not followed up: announced %v, slots freed %v", broker.published, broker.released)
			}
		})
	}
}
