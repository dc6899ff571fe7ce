package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/dispatcher"
	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// The guarantees of fair queues (fairness "round_robin"), end to end on PostgreSQL
// and Redis: the dispatcher's reach into every group, the claim's fair pop, and the
// slots freed by every end of an attempt. The lease, due-time and token-bucket
// clocks are one injected clock (testenv.Clock for the store, buffer.WithClock for
// the fair scripts), so no test sleeps.

// fairRig is one fair queue "fq" on its own database and Redis prefix, with
// replicas (a lifecycle and a dispatcher each) on the same clock.
type fairRig struct {
	t        *testing.T
	store    *storage.Store
	clock    *testenv.Clock
	rdb      *redis.Client
	prefix   string
	replicas []replica
}

type replica struct {
	lc *lifecycle.Lifecycle
	d  *dispatcher.Dispatcher
}

// newFairRig creates queue fq as q says (Name and Fairness are set here) with n
// replicas whose dispatchers top buffers up to target.
func newFairRig(t *testing.T, q storage.Queue, n, target int) *fairRig {
	t.Helper()
	base := testenv.NewStore(t)
	c := &testenv.Clock{}
	// An hour ahead: tasks enqueued at the database's now() are due however long a
	// loaded run takes between steps (with one second, a slow CI run once enqueued a
	// task after the clock's time, so the dispatch did not see it due).
	c.SetAhead(t, base, time.Hour)
	store := testenv.Clocked(base, c)
	rr := storage.FairnessRoundRobin
	q.Name, q.Fairness = "fq", &rr
	q.MaxRetries, q.BackoffBaseMs, q.BackoffMaxMs = 5, 1000, 1000
	if _, err := store.CreateQueue(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	r := &fairRig{t: t, store: store, clock: c, rdb: rdb, prefix: testenv.RedisPrefix(t)}
	for range n {
		buf := buffer.New(rdb, r.prefix).WithClock(c.Now)
		wakes := dispatcher.NewWakes()
		lc := lifecycle.New(store, buf, wakes, lifecycle.Config{BufferTarget: target}, quiet)
		d := dispatcher.New(store, buf, lc, wakes, dispatcher.Config{BufferTarget: target, GroupWindow: target,
			RepairAfter: time.Millisecond}, quiet)
		r.replicas = append(r.replicas, replica{lc: lc, d: d})
	}
	return r
}

// runDispatcher runs, until the test ends, a dispatcher of fq with cfg on a buffer
// and lifecycle of its own (so the rig's replicas' wake-ups do not reach it), and
// returns that buffer and the dispatcher's passes.
func (r *fairRig) runDispatcher(cfg dispatcher.Config) (*buffer.Buffer, <-chan dispatcher.Pass) {
	r.t.Helper()
	buf := buffer.New(r.rdb, r.prefix).WithClock(r.clock.Now)
	wakes := dispatcher.NewWakes()
	lc := lifecycle.New(r.store, buf, wakes, lifecycle.Config{BufferTarget: cfg.BufferTarget}, quiet)
	_, passes := startDispatcher(r.t, cfg, func(cfg dispatcher.Config) *dispatcher.Dispatcher {
		return dispatcher.New(r.store, buf, lc, wakes, cfg, quiet)
	})
	return buf, passes
}

// groupsWithWork reads how many of fq's groups hold buffered ids.
func (r *fairRig) groupsWithWork(buf *buffer.Buffer) int64 {
	r.t.Helper()
	_, n, err := buf.FairSize(context.Background(), "fq")
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

// enqueue adds n tasks of group (nil: the unnamed group) at priority.
func (r *fairRig) enqueue(group *string, priority, n int) []uuid.UUID {
	r.t.Helper()
	tasks := make([]storage.NewTask, n)
	ids := make([]uuid.UUID, n)
	for i := range tasks {
		ids[i] = uuid.Must(uuid.NewV7())
		tasks[i] = storage.NewTask{ID: ids[i], Payload: json.RawMessage(`1`), Priority: priority, Group: group}
	}
	if _, err := r.store.Enqueue(context.Background(), "fq", tasks, nil); err != nil {
		r.t.Fatal(err)
	}
	return ids
}

// dispatch runs one dispatch of fq on replica i and returns how many tasks it moved.
func (r *fairRig) dispatch(i int) int {
	r.t.Helper()
	n, err := r.replicas[i].d.DispatchQueues(context.Background(), "fq")
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

// claim polls up to want tasks of fq on replica i.
func (r *fairRig) claim(i, want int) ([]storage.Task, time.Duration) {
	r.t.Helper()
	ctx := context.Background()
	lc := r.replicas[i].lc
	limits, ok, err := lc.Limits().Get(ctx, "fq")
	if err != nil || !ok {
		r.t.Fatalf("settings of fq: %v %v", ok, err)
	}
	got, retry, err := lc.Claim(ctx, fmt.Sprintf("w%d", i), "fq", limits, want, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return got, retry
}

func (r *fairRig) ack(i int, t storage.Task) {
	r.t.Helper()
	if _, err := r.replicas[i].lc.Ack(context.Background(), storage.AckItem{TaskID: t.ID, LeaseToken: *t.LeaseToken,
		WorkerID: *t.ClaimedBy, Result: json.RawMessage(`1`)}); err != nil {
		r.t.Fatal(err)
	}
}

// executingByGroup reads from PostgreSQL how many tasks of each group execute.
func (r *fairRig) executingByGroup() map[string]int {
	r.t.Helper()
	rows, err := r.store.Pool().Query(context.Background(),
		`SELECT coalesce(group_key, ''), count(*) FROM tasks WHERE queue = 'fq' AND status = 'executing' GROUP BY 1`)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var g string
		var n int
		if err := rows.Scan(&g, &n); err != nil {
			r.t.Fatal(err)
		}
		out[g] = n
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// flush deletes every Redis key of the rig, as a FLUSHALL would.
func (r *fairRig) flush() {
	r.t.Helper()
	ctx := context.Background()
	iter := r.rdb.Scan(ctx, 0, r.prefix+":*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		r.t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := r.rdb.Del(ctx, keys...).Err(); err != nil {
			r.t.Fatal(err)
		}
	}
}

func groupsOf(tasks []storage.Task) []string {
	out := make([]string, len(tasks))
	for i, t := range tasks {
		out[i] = groupNameOf(t.Group)
	}
	return out
}

func groupNameOf(g *string) string {
	if g == nil {
		return ""
	}
	return *g
}

func ptr[T any](v T) *T { return &v }

// TestFairBacklogDoesNotHideAnotherGroup: group A's backlog fills the buffer; B
// then enqueues k tasks, and the next dispatch buffers them although the buffer is
// full (every group's head stays reachable). Polling one task at a time, B's k go
// out while A gets at most k (§11 guarantee 3, with nothing in flight).
func TestFairBacklogDoesNotHideAnotherGroup(t *testing.T) {
	t.Parallel()
	r := newFairRig(t, storage.Queue{}, 1, 100)
	a, b := ptr("tenant-a"), ptr("tenant-b")
	r.enqueue(a, 5, 1000)
	if n := r.dispatch(0); n != 100 {
		t.Fatalf("first dispatch moved %d, want the target 100 of A's backlog", n)
	}
	const k = 7
	r.enqueue(b, 5, k)
	if n := r.dispatch(0); n != k {
		t.Fatalf("dispatch after B's enqueue moved %d, want B's %d (A is at its share)", n, k)
	}
	aBefore, bGot := 0, 0
	for bGot < k {
		got, _ := r.claim(0, 1)
		if len(got) != 1 {
			t.Fatalf("poll got %d tasks with B's work buffered", len(got))
		}
		if groupNameOf(got[0].Group) == *b {
			bGot++
		} else {
			aBefore++
		}
		r.ack(0, got[0])
	}
	if aBefore > k {
		t.Fatalf("A got %d tasks before B's %d were out, want at most %d", aBefore, k, k)
	}
	if aBefore < k-1 {
		t.Fatalf("A got only %d tasks meanwhile: turns are not shared (want about %d)", aBefore, k)
	}
}

// TestFairPriorityFirstAndFullGroupDoesNotBlock: a priority-1 task of any group goes
// before the priority-5 backlog of every group (guarantee 5), and while group A
// sits at its cap, B's due task goes out at once (guarantee 4).
func TestFairPriorityFirstAndFullGroupDoesNotBlock(t *testing.T) {
	t.Parallel()
	r := newFairRig(t, storage.Queue{GroupMaxConcurrency: ptr(1)}, 1, 100)
	a, b := ptr("a"), ptr("b")
	r.enqueue(a, 5, 50)
	r.enqueue(nil, 5, 50)
	r.dispatch(0)
	urgent := r.enqueue(b, 1, 1)
	r.dispatch(0)
	got, _ := r.claim(0, 1)
	if len(got) != 1 || got[0].ID != urgent[0] {
		t.Fatalf("first poll got %v, want B's priority-1 task", groupsOf(got))
	}
	r.ack(0, got[0])
	// A and the unnamed group take one slot each; then both are at their cap.
	got, _ = r.claim(0, 10)
	if gs := groupsOf(got); len(gs) != 2 || !slices.Contains(gs, "a") || !slices.Contains(gs, "") {
		t.Fatalf("poll under a cap of 1 got groups %v, want one of a and one of the unnamed group", gs)
	}
	if more, _ := r.claim(0, 10); len(more) != 0 {
		t.Fatalf("poll with every group at its cap got %v", groupsOf(more))
	}
	// B enqueues while the others are full: its task goes out at once.
	late := r.enqueue(b, 5, 1)
	r.dispatch(0)
	if more, _ := r.claim(0, 10); len(more) != 1 || more[0].ID != late[0] {
		t.Fatalf("poll with A full got %v, want B's new task", groupsOf(more))
	}
	// An ack frees A's slot: its next task goes.
	for _, task := range got {
		if groupNameOf(task.Group) == "a" {
			r.ack(0, task)
		}
	}
	if more, _ := r.claim(0, 10); len(more) != 1 || groupNameOf(more[0].Group) != "a" {
		t.Fatalf("after A's ack, poll got %v, want one task of a", groupsOf(more))
	}
}

// TestFairCapsHoldAcrossReplicasAndReleases: pollers on two replicas claim, ack and
// release (a released task goes back in line) the tasks of three groups under a
// group cap of 2; PostgreSQL never shows a group with more than 2 executing, and
// every task ends done (guarantee 1, across replicas and releases).
func TestFairCapsHoldAcrossReplicasAndReleases(t *testing.T) {
	t.Parallel()
	const capacity, perGroup = 2, 30
	r := newFairRig(t, storage.Queue{GroupMaxConcurrency: ptr(capacity)}, 2, 50)
	groups := []string{"g1", "g2", "g3"}
	for _, g := range groups {
		r.enqueue(ptr(g), 5, perGroup)
	}
	var done, released, peak atomic.Int64
	var failure atomic.Value
	// check reads PostgreSQL's view after every claim, while the other pollers go on.
	check := func() {
		for g, n := range r.executingByGroup() {
			if int64(n) > peak.Load() {
				peak.Store(int64(n))
			}
			if n > capacity {
				failure.Store(fmt.Sprintf("group %s has %d executing, over its cap of %d", g, n, capacity))
			}
		}
	}
	var pollers sync.WaitGroup
	for p := range 4 {
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			i := p % 2
			lc := r.replicas[i].lc
			ctx := context.Background()
			for idle := 0; done.Load() < int64(len(groups)*perGroup) && idle < 2000; {
				if _, err := r.replicas[i].d.DispatchQueues(ctx, "fq"); err != nil {
					failure.Store(err.Error())
					return
				}
				limits, _, err := lc.Limits().Get(ctx, "fq")
				if err != nil {
					failure.Store(err.Error())
					return
				}
				got, _, err := lc.Claim(ctx, fmt.Sprintf("w%d", p), "fq", limits, 3, 0)
				if err != nil {
					failure.Store(err.Error())
					return
				}
				if len(got) == 0 {
					idle++
					continue
				}
				idle = 0
				check()
				for j, task := range got {
					if task.Releases == 0 && j == 0 && released.Load() < 10 {
						released.Add(1)
						if _, err := lc.Release(ctx, storage.Release{TaskID: task.ID, LeaseToken: *task.LeaseToken,
							WorkerID: *task.ClaimedBy, Reason: "test"}); err != nil {
							failure.Store(err.Error())
							return
						}
						continue
					}
					if _, err := lc.Ack(ctx, storage.AckItem{TaskID: task.ID, LeaseToken: *task.LeaseToken,
						WorkerID: *task.ClaimedBy, Result: json.RawMessage(`1`)}); err != nil {
						failure.Store(err.Error())
						return
					}
					done.Add(1)
				}
			}
		}()
	}
	pollers.Wait()
	if f := failure.Load(); f != nil {
		t.Fatal(f)
	}
	if done.Load() != int64(len(groups)*perGroup) {
		t.Fatalf("%d of %d tasks done", done.Load(), len(groups)*perGroup)
	}
	if released.Load() == 0 {
		t.Fatal("no task was released: the test did not exercise releases")
	}
	t.Logf("peak executing per group %d (cap %d), %d released", peak.Load(), capacity, released.Load())
}

// TestFairCapHoldsThroughLeaseExpiryAndLostRedis: under a group cap of 1, a task
// whose lease expires keeps its slot until the watchdog's reclaim frees it; after
// Redis loses every key, the repair pass re-adds the buffered tasks to their groups
// and the pop rebuilds the slots from PostgreSQL, so the cap still holds.
func TestFairCapHoldsThroughLeaseExpiryAndLostRedis(t *testing.T) {
	t.Parallel()
	r := newFairRig(t, storage.Queue{GroupMaxConcurrency: ptr(1)}, 1, 100)
	a := ptr("a")
	r.enqueue(a, 5, 5)
	r.dispatch(0)
	first, _ := r.claim(0, 5)
	if len(first) != 1 {
		t.Fatalf("first poll got %d tasks under a cap of 1", len(first))
	}
	if more, _ := r.claim(0, 5); len(more) != 0 {
		t.Fatalf("poll at the cap got %d", len(more))
	}
	// The lease expires: the slot is held until the reclaim frees it.
	r.clock.Advance(31 * time.Second)
	if more, _ := r.claim(0, 5); len(more) != 0 {
		t.Fatalf("poll after the lease expired, before the reclaim, got %d", len(more))
	}
	if ended, err := r.replicas[0].lc.Reclaim(context.Background(), 10); err != nil || len(ended) != 1 {
		t.Fatalf("reclaim ended %d (%v), want 1", len(ended), err)
	}
	second, _ := r.claim(0, 5)
	if len(second) != 1 {
		t.Fatalf("poll after the reclaim got %d, want 1", len(second))
	}
	// Redis loses everything: buffer entries, slots, turn structures.
	r.flush()
	if _, err := r.replicas[0].d.RepairStep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if more, _ := r.claim(0, 5); len(more) != 0 {
		t.Fatalf("poll after Redis lost its data got %d with a's task executing under a cap of 1", len(more))
	}
	if got := r.executingByGroup(); got["a"] != 1 {
		t.Fatalf("executing by group: %v, want a: 1", got)
	}
	r.ack(0, second[0])
	third, _ := r.claim(0, 5)
	if len(third) != 1 {
		t.Fatalf("poll after the ack got %d, want 1 (the repair re-added the buffered tasks)", len(third))
	}
}

// TestFairGroupRateHolds: a group rate of 10/s with a burst of 2 lets each group
// start 2 at once, then one per 100 ms on the shared clock; an empty poll says
// when the next token is due (guarantee 2).
func TestFairGroupRateHolds(t *testing.T) {
	t.Parallel()
	r := newFairRig(t, storage.Queue{GroupRateLimit: ptr(10.0), GroupRateBurst: ptr(2)}, 1, 100)
	r.enqueue(ptr("a"), 5, 20)
	r.enqueue(ptr("b"), 5, 20)
	r.dispatch(0)
	got, _ := r.claim(0, 10)
	if gs := groupsOf(got); len(gs) != 4 {
		t.Fatalf("first poll got %v, want the burst of 2 of each group", gs)
	}
	more, retry := r.claim(0, 10)
	if len(more) != 0 || retry <= 0 || retry > 100*time.Millisecond {
		t.Fatalf("poll with no tokens got %d, retry after %v; want none, retry within 100ms", len(more), retry)
	}
	started := len(got)
	for range 10 {
		r.clock.Advance(100 * time.Millisecond)
		got, _ = r.claim(0, 10)
		started += len(got)
	}
	// In the window of 1 s: at most burst + rate·T per group = 2 + 10 each.
	if started > 2*(2+10) || started < 2*(2+9) {
		t.Fatalf("%d tasks started in 1 s, want %d..%d", started, 2*(2+9), 2*(2+10))
	}
}

// TestFairDispatchReachesGroupsBeyondOneLook: with more groups than one look lists,
// the next looks go on from where the last ended, so every group is served.
func TestFairDispatchReachesGroupsBeyondOneLook(t *testing.T) {
	t.Parallel()
	r := newFairRig(t, storage.Queue{}, 1, 10) // looks of 10 pairs, target 10
	const groups, each = 35, 3
	for g := range groups {
		r.enqueue(ptr(fmt.Sprintf("g%02d", g)), 5, each)
	}
	seen := map[string]int{}
	for pass := 0; pass < 100 && len(seen) < groups; pass++ {
		r.dispatch(0)
		got, _ := r.claim(0, 100)
		for _, task := range got {
			seen[groupNameOf(task.Group)]++
			r.ack(0, task)
		}
	}
	if len(seen) != groups {
		t.Fatalf("%d of %d groups served", len(seen), groups)
	}
}

// TestFairnessChangeMovesBufferedTasks: switching a live queue between plain and
// fair leaves its buffered tasks buffered in PostgreSQL; the repair pass adds them
// to the new layout, and every task is claimed once.
func TestFairnessChangeMovesBufferedTasks(t *testing.T) {
	t.Parallel()
	r := newFairRig(t, storage.Queue{}, 1, 100)
	ctx := context.Background()
	lc := r.replicas[0].lc
	setFairness := func(f *string) {
		t.Helper()
		if _, err := lc.ChangeQueue(ctx, "fq", func(q *storage.Queue) error { q.Fairness = f; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	setFairness(nil)
	r.enqueue(ptr("a"), 5, 10)
	r.enqueue(ptr("b"), 5, 10)
	if n := r.dispatch(0); n != 20 {
		t.Fatalf("plain dispatch moved %d", n)
	}
	claimed := map[uuid.UUID]bool{}
	take := func(want int) {
		t.Helper()
		got, _ := r.claim(0, want)
		for _, task := range got {
			if claimed[task.ID] {
				t.Fatalf("task %s claimed twice", task.ID)
			}
			claimed[task.ID] = true
			r.ack(0, task)
		}
	}
	take(5)
	setFairness(ptr(storage.FairnessRoundRobin))
	if got, _ := r.claim(0, 5); len(got) != 0 {
		t.Fatalf("fair poll before the repair got %d (the plain entries were dropped)", len(got))
	}
	r.clock.Advance(time.Second)
	if n, err := r.replicas[0].d.RepairStep(ctx); err != nil || n != 15 {
		t.Fatalf("repair re-added %d (%v), want the 15 buffered", n, err)
	}
	take(10)
	setFairness(nil)
	if n, err := r.replicas[0].d.RepairStep(ctx); err != nil || n != 5 {
		t.Fatalf("repair after the switch back re-added %d (%v), want 5", n, err)
	}
	take(10)
	if len(claimed) != 20 {
		t.Fatalf("%d of 20 tasks claimed", len(claimed))
	}
}

// TestFairEnqueueBuffersAnIdleGroupAtOnce: in a fair queue whose group A holds a
// due backlog the dispatcher has not moved yet, an enqueue of group B's tasks puts
// them in the buffer itself, and the next poll gets B's task with no dispatch in
// between (§11: a small group's task waits one turn, not a dispatcher pass). A
// group that already holds buffered or due pending tasks goes through the
// dispatcher as before, and so does A's.
func TestFairEnqueueBuffersAnIdleGroupAtOnce(t *testing.T) {
	t.Parallel()
	r := newFairRig(t, storage.Queue{}, 1, 100)
	ctx := context.Background()
	lc := r.replicas[0].lc
	enqueue := func(group *string, n int) []storage.Enqueued {
		t.Helper()
		tasks := make([]storage.NewTask, n)
		for i := range tasks {
			tasks[i] = storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`1`), Priority: 5, Group: group}
		}
		out, err := lc.Enqueue(ctx, "fq", tasks, true)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	statuses := func(out []storage.Enqueued) []string {
		s := make([]string, len(out))
		for i, e := range out {
			s[i] = e.Task.Status
		}
		return s
	}
	a, b := ptr("a"), ptr("b")
	r.enqueue(a, 5, 500) // A's backlog: pending, not dispatched
	if got := statuses(enqueue(b, 2)); !slices.Equal(got, []string{storage.StatusBuffered, storage.StatusBuffered}) {
		t.Fatalf("B's first tasks beside A's backlog: %v, want both buffered at once", got)
	}
	if got := statuses(enqueue(b, 1)); !slices.Equal(got, []string{storage.StatusPending}) {
		t.Fatalf("B's task with B's first ones still buffered: %v, want pending", got)
	}
	if got := statuses(enqueue(a, 1)); !slices.Equal(got, []string{storage.StatusPending}) {
		t.Fatalf("A's task behind A's due backlog: %v, want pending", got)
	}
	got, _ := r.claim(0, 1)
	if len(got) != 1 || groupNameOf(got[0].Group) != "b" {
		t.Fatalf("poll with no dispatch yet got %v, want one of B's tasks", groupsOf(got))
	}
}

// TestFairDispatchBuffersEveryIdleHeadWithoutWaitingForSweeps: with more groups of
// due work than a pass's looks list, a pass that buffered heads of groups holding
// nothing wakes the queue again, so every head goes in pass after pass, not one
// look per sweep (with 100,000 groups: over 8 minutes). Sweeps and ticks are an hour
// apart here, so only those wake-ups can finish the job.
func TestFairDispatchBuffersEveryIdleHeadWithoutWaitingForSweeps(t *testing.T) {
	t.Parallel()
	const target, groups = 10, 95 // a pass looks at most 4 × 10 groups
	r := newFairRig(t, storage.Queue{}, 1, target)
	for g := range groups {
		r.enqueue(ptr(fmt.Sprintf("g%03d", g)), 5, 2)
	}
	buf, passes := r.runDispatcher(dispatcher.Config{BufferTarget: target, GroupWindow: target,
		Interval: time.Hour, SweepInterval: time.Hour, RepairInterval: time.Hour, NoListen: true})
	nextPass(t, passes, "after which every group's head is buffered, without a sweep",
		func(dispatcher.Pass) bool { return r.groupsWithWork(buf) == groups })
}

// TestFairSweepLeavesASettledQueueAlone: once every group with due work holds its
// head in the buffer and nobody polls, the periodic sweep leaves the fair queue
// alone instead of looking at its groups again every time; a pop that empties a
// group's buffer, and work a NOTIFY announces in a new group, are still buffered.
func TestFairSweepLeavesASettledQueueAlone(t *testing.T) {
	t.Parallel()
	const target, groups = 10, 25 // a cycle of looks at the groups spans 3 windows
	r := newFairRig(t, storage.Queue{}, 1, target)
	for g := range groups {
		r.enqueue(ptr(fmt.Sprintf("g%03d", g)), 5, 3)
	}
	buf, passes := r.runDispatcher(dispatcher.Config{BufferTarget: target, GroupWindow: target,
		Interval: time.Hour, SweepInterval: 20 * time.Millisecond, RepairInterval: time.Hour})
	withWork := func() int64 { return r.groupsWithWork(buf) }
	settled := func(p dispatcher.Pass) bool { return p.Sweep && slices.Contains(p.Settled, "fq") }
	nextPass(t, passes, "that leaves the settled queue alone", settled)
	if n := withWork(); n != groups {
		t.Fatalf("settled with %d of %d groups' heads buffered", n, groups)
	}
	nextPass(t, passes, "that leaves it alone again", settled)

	// A pop takes one group's only buffered id: the next sweep looks again.
	if got, _ := r.claim(0, 1); len(got) != 1 {
		t.Fatalf("claimed %d tasks, want 1", len(got))
	}
	p := nextPass(t, passes, "that refills the emptied group", func(p dispatcher.Pass) bool { return p.Moved["fq"] > 0 })
	if p.Moved["fq"] != 1 || withWork() != groups {
		t.Fatalf("pass %+v left %d of %d groups with buffered work, want 1 task moved and all", p, withWork(), groups)
	}
	nextPass(t, passes, "that leaves it alone once settled again", settled)

	// A new group's task, announced by its enqueue's NOTIFY, is buffered at once.
	r.enqueue(ptr("new"), 5, 1)
	nextPass(t, passes, "that buffers the new group's task", func(p dispatcher.Pass) bool { return p.Moved["fq"] > 0 })
	if n := withWork(); n != groups+1 {
		t.Fatalf("%d groups with buffered work after the new group's enqueue, want %d", n, groups+1)
	}
}
