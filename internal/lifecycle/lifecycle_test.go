package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
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

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// bundle is what a test of the transitions needs: the lifecycle and what is under it.
type bundle struct {
	lc    *lifecycle.Lifecycle
	store *storage.Store
	buf   *buffer.Buffer
	rdb   *redis.Client
	wake  *lifecycle.RecordingWaker
	disp  *dispatcher.Dispatcher
	// clock is the store's: zero (the database's now()) until a test sets it.
	clock *testenv.Clock
}

// setup returns a lifecycle on a database and a Redis key prefix of the test's own,
// with one queue "q" that runs one task at a time and retries at once.
func setup(t *testing.T) bundle {
	t.Helper()
	clock := &testenv.Clock{}
	store := testenv.Clocked(testenv.NewStore(t), clock)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	buf := buffer.New(rdb, testenv.RedisPrefix(t))
	one := 1
	if _, err := store.CreateQueue(context.Background(), storage.Queue{Name: "q", MaxRetries: 3, MaxConcurrency: &one}); err != nil {
		t.Fatal(err)
	}
	w := &lifecycle.RecordingWaker{}
	lc := lifecycle.New(store, buf, w, lifecycle.Config{LowWater: 10}, quiet)
	return bundle{lc: lc, store: store, buf: buf, rdb: rdb, wake: w,
		disp: dispatcher.New(store, buf, lc, nil, dispatcher.Config{}, quiet), clock: clock}
}

// enqueue adds n tasks to q and mirrors them into the buffer, as the dispatcher does.
func (b bundle) enqueue(t *testing.T, n int) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	tasks := make([]storage.NewTask, n)
	ids := make([]uuid.UUID, n)
	for i := range tasks {
		ids[i] = uuid.Must(uuid.NewV7())
		tasks[i] = storage.NewTask{ID: ids[i], Payload: json.RawMessage(`{}`), Priority: 5}
	}
	if _, err := b.store.Enqueue(ctx, "q", tasks, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.disp.DispatchQueues(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	return ids
}

func (b bundle) claim(t *testing.T, worker string) []storage.Task {
	t.Helper()
	ctx := context.Background()
	limits, ok, err := b.lc.Limits().Get(ctx, "q")
	if err != nil || !ok {
		t.Fatalf("settings of q: %v %v", ok, err)
	}
	tasks, _, err := b.lc.Claim(ctx, worker, "q", limits, 5, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

// TestClaimAckEndToEnd follows one task from the buffer to done: the claim takes the
// queue's only slot, the ack frees it, and the task's waiters hear of its end here
// and, through Redis, on every replica.
func TestClaimAckEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.enqueue(t, 2)

	got := b.claim(t, "w1")
	if len(got) != 1 || got[0].ID != ids[0] || got[0].Status != storage.StatusExecuting || got[0].LeaseToken == nil {
		t.Fatalf("claimed %+v, want the first task executing under a lease", got)
	}
	if _, low := b.wake.Woken(); !slices.Equal(low, []string{"q"}) {
		t.Fatalf("WakeLow heard %v, want q (one id left, below the low-water mark)", low)
	}
	if more := b.claim(t, "w2"); len(more) != 0 {
		t.Fatalf("claimed %d more tasks past the concurrency cap of 1", len(more))
	}

	sub := b.rdb.Subscribe(ctx, b.buf.DoneChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription is in place
		t.Fatal(err)
	}
	ended, leave := b.lc.AwaitEnd(ids[0])
	defer leave()

	// A stale token changes nothing.
	if _, err := b.lc.Ack(ctx, storage.AckItem{TaskID: ids[0], LeaseToken: uuid.New(), WorkerID: "w1"}); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("ack with a stale token: %v, want ErrLeaseLost", err)
	}
	done, err := b.lc.Ack(ctx, storage.AckItem{TaskID: ids[0], LeaseToken: *got[0].LeaseToken, WorkerID: "w1",
		Result: json.RawMessage(`{"ok":true}`)})
	if err != nil || done.Status != storage.StatusDone {
		t.Fatalf("ack: %+v %v", done, err)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("this replica's waiter of the task was not woken")
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || !slices.Equal(buffer.ParseDone(msg.Payload), []uuid.UUID{ids[0]}) {
		t.Fatalf("done channel carried %v (%v), want the acked task", msg, err)
	}

	// The ack freed the slot: the second task can run now.
	next := b.claim(t, "w2")
	if len(next) != 1 || next[0].ID != ids[1] {
		t.Fatalf("claimed %+v after the ack, want the second task", next)
	}
	// A retryable nack sends it to retry and tells the dispatcher.
	retry, err := b.lc.Nack(ctx, storage.Nack{TaskID: ids[1], LeaseToken: *next[0].LeaseToken, WorkerID: "w2",
		Error: "boom", Retryable: true})
	if err != nil || retry.Status != storage.StatusRetry {
		t.Fatalf("nack: %+v %v", retry, err)
	}
	if due, _ := b.wake.Woken(); !slices.Equal(due, []string{"q"}) {
		t.Fatalf("Wake heard %v, want q once (the retry)", due)
	}
}

// TestCancelDropsBufferedTask cancels a task that waits in the buffer: it ends
// cancelled, leaves the buffer and is announced.
func TestCancelDropsBufferedTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.enqueue(t, 1)
	ended, leave := b.lc.AwaitEnd(ids[0])
	defer leave()
	c, err := b.lc.Cancel(ctx, "q", ids[0])
	if err != nil || c.Status != storage.StatusCancelled {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the task's waiter was not woken")
	}
	sizes, err := b.buf.Sizes(ctx, []string{"q"})
	if err != nil || sizes["q"] != 0 {
		t.Fatalf("buffer holds %v (%v), want nothing", sizes, err)
	}
	if _, err := b.lc.Cancel(ctx, "q", ids[0]); !errors.Is(err, storage.ErrTaskNotCancellable) {
		t.Fatalf("second cancel: %v, want ErrTaskNotCancellable", err)
	}
}

// TestReclaimNackAndReplay follows a task through a lost lease (the watchdog's
// reclaim frees the slot and plans the retry), a permanent failure (dead, its waiter
// told) and a replay (a new pending task, the dispatcher told).
func TestReclaimNackAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.enqueue(t, 2)
	limits, _, err := b.lc.Limits().Get(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	lost, _, err := b.lc.Claim(ctx, "crashed", "q", limits, 1, 50*time.Millisecond)
	if err != nil || len(lost) != 1 {
		t.Fatalf("claim: %d %v", len(lost), err)
	}
	b.clock.SetAhead(t, b.store, time.Second) // past the 50 ms lease
	reclaimed, err := b.lc.Reclaim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(reclaimed) != 1 || reclaimed[0].TaskID != ids[0] || reclaimed[0].Status != storage.StatusRetry {
		t.Fatalf("reclaimed %+v, want the first task sent to retry", reclaimed)
	}
	if due, _ := b.wake.Woken(); !slices.Equal(due, []string{"q"}) {
		t.Fatalf("Wake heard %v, want q (the retry)", due)
	}

	// The reclaim freed the only slot: the second task can run, and fails for good.
	next := b.claim(t, "w")
	if len(next) != 1 || next[0].ID != ids[1] {
		t.Fatalf("claimed %+v after the reclaim, want the second task", next)
	}
	ended, leave := b.lc.AwaitEnd(ids[1])
	defer leave()
	dead, err := b.lc.Nack(ctx, storage.Nack{TaskID: ids[1], LeaseToken: *next[0].LeaseToken, WorkerID: "w",
		Error: "bad input", Retryable: false})
	if err != nil || dead.Status != storage.StatusDead {
		t.Fatalf("permanent nack: %+v %v", dead, err)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the dead task's waiter was not woken")
	}

	replayed, err := b.lc.Replay(ctx, "q", []uuid.UUID{ids[1]}, false)
	if err != nil || len(replayed) != 1 || replayed[0].ReplayedFrom == nil || *replayed[0].ReplayedFrom != ids[1] ||
		replayed[0].Status != storage.StatusPending {
		t.Fatalf("replay: %+v %v", replayed, err)
	}
	if due, _ := b.wake.Woken(); !slices.Equal(due, []string{"q", "q"}) {
		t.Fatalf("Wake heard %v, want q twice (the retry, the replay)", due)
	}
}

// TestBulkCancelDropsFairBufferedTasks: a bulk cancel on a fair queue drops the
// cancelled tasks from their groups' buffers, by id and by status, so that no
// buffered id of a cancelled task waits for a claim to skip it.
func TestBulkCancelDropsFairBufferedTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rr := storage.FairnessRoundRobin
	if _, err := b.store.CreateQueue(ctx, storage.Queue{Name: "f", MaxRetries: 3, Fairness: &rr}); err != nil {
		t.Fatal(err)
	}
	groups := []*string{ptr("acme"), ptr("acme"), ptr("beta"), nil, ptr("gamma"), ptr("gamma")}
	tasks := make([]storage.NewTask, len(groups))
	ids := make([]uuid.UUID, len(groups))
	for i, g := range groups {
		ids[i] = uuid.Must(uuid.NewV7())
		tasks[i] = storage.NewTask{ID: ids[i], Payload: json.RawMessage(`{}`), Priority: 5, Group: g}
	}
	if _, err := b.store.Enqueue(ctx, "f", tasks, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.disp.DispatchQueues(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	size := func() (int64, int64) {
		t.Helper()
		n, g, err := b.buf.FairSize(ctx, "f")
		if err != nil {
			t.Fatal(err)
		}
		return n, g
	}
	if n, g := size(); n != 6 || g != 4 {
		t.Fatalf("buffered %d ids in %d groups, want 6 in 4", n, g)
	}
	// By id: beta's task and one of acme's.
	if c, _, err := b.lc.CancelMany(ctx, "f", lifecycle.CancelSelection{IDs: []uuid.UUID{ids[1], ids[2]}}); err != nil || c != 2 {
		t.Fatalf("cancel by id: %d, %v", c, err)
	}
	if n, g := size(); n != 4 || g != 3 {
		t.Fatalf("after the cancel by id: %d ids in %d groups, want 4 in 3", n, g)
	}
	// By status: the rest, the unnamed group's included.
	c, _, err := b.lc.CancelMany(ctx, "f", lifecycle.CancelSelection{Statuses: []string{storage.StatusPending, storage.StatusBuffered}})
	if err != nil || c != 4 {
		t.Fatalf("cancel by status: %d, %v", c, err)
	}
	if n, g := size(); n != 0 || g != 0 {
		t.Fatalf("after the cancel by status: %d ids in %d groups, want none", n, g)
	}
}

func ptr[T any](v T) *T { return &v }
