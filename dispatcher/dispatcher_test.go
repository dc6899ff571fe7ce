package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/dispatcher"
	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testsignal"
	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newDispatcher returns a dispatcher on store and buf that dispatches through a
// lifecycle on them, wired as a replica wires them: the lifecycle posts to the
// dispatcher's wake-ups.
func newDispatcher(store *storage.Store, buf *buffer.Buffer, cfg dispatcher.Config, log *slog.Logger) *dispatcher.Dispatcher {
	wakes := dispatcher.NewWakes()
	lc := lifecycle.New(store, buf, wakes, lifecycle.Config{}, log)
	return dispatcher.New(store, buf, lc, wakes, cfg, log)
}

type bundle struct {
	store *storage.Store
	buf   *buffer.Buffer
	rdb   *redis.Client
}

func setup(t *testing.T) bundle {
	t.Helper()
	ctx := context.Background()
	store := testenv.NewStore(t)
	if _, err := store.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 3, BackoffBaseMs: 1000, BackoffMaxMs: 1000}); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	return bundle{store: store, buf: buffer.New(rdb, testenv.RedisPrefix(t)), rdb: rdb}
}

func enqueue(t *testing.T, s *storage.Store, n int, at *time.Time) {
	t.Helper()
	tasks := make([]storage.NewTask, n)
	for i := range tasks {
		tasks[i] = storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`1`), Priority: 1 + i%10, ScheduledAt: at}
	}
	if _, err := s.Enqueue(context.Background(), "q", tasks, nil); err != nil {
		t.Fatal(err)
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestConcurrentDispatchersBufferEachTaskOnceUpToTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	enqueue(t, b.store, 3000, nil)
	future := time.Now().Add(time.Hour)
	enqueue(t, b.store, 50, &future)

	cfg := dispatcher.Config{BufferTarget: 1000, BatchSize: 100}
	var wg sync.WaitGroup
	moved := make([]int, 4)
	for i := range moved {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := newDispatcher(b.store, b.buf, cfg, quiet).DispatchOnce(ctx)
			if err != nil {
				t.Error(err)
			}
			moved[i] = n
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range moved {
		total += n
	}
	size := b.rdb.ZCard(ctx, b.buf.Key("q")).Val()
	// Each replica tops up to the target from the size it saw, so together they may
	// overshoot, but never buffer a task twice or a task that is not due.
	if int64(total) != size || size < 1000 || size > 4000 {
		t.Fatalf("dispatchers moved %d tasks, buffer holds %d; want equal and within [1000, 4000]", total, size)
	}
	var claimed int
	if err := b.store.Pool().QueryRow(ctx, `SELECT count(*) FROM tasks WHERE status = 'claimed'`).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if int64(claimed) != size {
		t.Fatalf("%d tasks claimed in PostgreSQL, %d ids buffered", claimed, size)
	}
	// A second pass with a full buffer moves nothing.
	if n, err := newDispatcher(b.store, b.buf, dispatcher.Config{BufferTarget: 1000}, quiet).DispatchOnce(ctx); err != nil || n != 0 {
		t.Fatalf("full buffer: moved %d (%v)", n, err)
	}
}

func TestRepairReaddsLostEntries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	enqueue(t, b.store, 20, nil)
	var clock testenv.Clock // zero: the database's now(), until the repair
	store := testenv.Clocked(b.store, &clock)
	d := newDispatcher(store, b.buf, dispatcher.Config{RepairAfter: time.Millisecond}, quiet)
	if n, err := d.DispatchOnce(ctx); err != nil || n != 20 {
		t.Fatalf("dispatch: %d %v", n, err)
	}
	// Lose 5 entries as a crash between pop and claim would, and the rest as FLUSHALL would.
	if _, err := b.buf.Pop(ctx, "q", 5, ratelimit.Limits{}); err != nil {
		t.Fatal(err)
	}
	clock.SetAhead(t, b.store, time.Second) // the buffered entries are now older than RepairAfter
	if n, err := d.RepairOnce(ctx); err != nil || n != 5 {
		t.Fatalf("repair after pop: re-added %d (%v), want 5", n, err)
	}
	b.rdb.Del(ctx, b.buf.Key("q"))
	if n, err := d.RepairOnce(ctx); err != nil || n != 20 {
		t.Fatalf("repair after loss: re-added %d (%v), want 20", n, err)
	}
	if n, err := d.RepairOnce(ctx); err != nil || n != 0 {
		t.Fatalf("repair of a whole buffer: re-added %d (%v), want 0", n, err)
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	enqueue(t, b.store, 10, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var passes testsignal.Signal[dispatcher.Pass]
	passes.Init()
	d := newDispatcher(b.store, b.buf, dispatcher.Config{Interval: time.Hour, OnPass: passes.Signal}, quiet)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	// The first pass runs at once; LISTEN picks up a later enqueue without a tick.
	waitBuffered(t, b, &passes, 10, "the first pass")
	enqueue(t, b.store, 5, nil)
	waitBuffered(t, b, &passes, 15, "the pass NOTIFY wakes")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testsignal.Timeout):
		t.Fatal("Run did not return after cancel")
	}
}

func TestRunDispatchesAScheduledTaskWhenDueNotOnTheNextTick(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var passes testsignal.Signal[dispatcher.Pass]
	passes.Init()
	d := newDispatcher(b.store, b.buf, dispatcher.Config{Interval: time.Hour, OnPass: passes.Signal}, quiet)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	at := time.Now().Add(300 * time.Millisecond)
	enqueue(t, b.store, 1, &at)
	// The tick is an hour: only the pass planned for the task's due time moves it.
	waitBuffered(t, b, &passes, 1, "the pass planned for a task due in 300 ms")
	if late := time.Since(at); late < 0 || late > 2*time.Second {
		t.Fatalf("dispatched %s after it became due", late)
	}
	cancel()
	<-done
}

// behindPgBouncer returns a store on a fresh migrated database whose pool goes
// through PgBouncer in transaction mode, a store on the same database directly
// (the producer side), and the direct URL.
func behindPgBouncer(t *testing.T) (bouncer, direct *storage.Store, directURL string) {
	t.Helper()
	ctx := context.Background()
	directURL = testenv.NewDatabase(t)
	directPool, err := storage.Connect(ctx, directURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(directPool.Close)
	if _, err := migrations.Apply(ctx, directPool); err != nil {
		t.Fatal(err)
	}
	direct = storage.New(directPool)
	if _, err := direct.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 3, BackoffBaseMs: 1000, BackoffMaxMs: 1000}); err != nil {
		t.Fatal(err)
	}
	pb := testenv.StartPgBouncer(t, directURL)
	pool, err := storage.Connect(ctx, pb.URL, 4, storage.BehindTransactionPooler(pb.URL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return storage.New(pool), direct, directURL
}

// listeners counts the sessions on s's database named application whose last
// statement was LISTEN on storage.DueChannel.
func listeners(t *testing.T, s *storage.Store, application string) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND query = 'LISTEN '||$2`,
		application, storage.DueChannel).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitBuffered waits, pass by pass, until queue q's buffer holds n ids.
func waitBuffered(t *testing.T, b bundle, passes *testsignal.Signal[dispatcher.Pass], n int64, what string) {
	t.Helper()
	size := func() int64 { return b.rdb.ZCard(context.Background(), b.buf.Key("q")).Val() }
	passes.WaitUntil(t, fmt.Sprintf("%s to buffer %d ids", what, n), func() bool { return size() == n })
}

// TestListenConnConfigWakesBehindPgBouncer: with the store's pool behind PgBouncer,
// LISTEN goes to ListenConnConfig (a direct connection), and a NOTIFY from another
// process's enqueue wakes the dispatcher long before its hour-long tick.
func TestListenConnConfigWakesBehindPgBouncer(t *testing.T) {
	t.Parallel()
	pooled, direct, directURL := behindPgBouncer(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	b := bundle{store: pooled, buf: buffer.New(rdb, testenv.RedisPrefix(t)), rdb: rdb}
	listenCfg, err := pgx.ParseConfig(directURL)
	if err != nil {
		t.Fatal(err)
	}
	listenCfg.RuntimeParams["application_name"] = "tf-dispatcher-listen"

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var passes testsignal.Signal[dispatcher.Pass]
	passes.Init()
	d := newDispatcher(pooled, b.buf, dispatcher.Config{Interval: time.Hour, ListenConnConfig: listenCfg, OnPass: passes.Signal}, quiet)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	enqueue(t, direct, 3, nil)
	waitBuffered(t, b, &passes, 3, "the first pass or NOTIFY")
	// Once LISTEN is in place the dispatcher asks itself for a sweep, so a pass
	// follows every new LISTEN session.
	passes.WaitUntil(t, "a LISTEN session from ListenConnConfig", func() bool {
		return listeners(t, direct, "tf-dispatcher-listen") == 1
	})
	enqueue(t, direct, 2, nil) // by another process: only NOTIFY can tell the dispatcher
	waitBuffered(t, b, &passes, 5, "NOTIFY over the direct connection")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestNoListenDispatchesOnTheTick: with LISTEN off the dispatcher opens no LISTEN
// session, and work enqueued elsewhere is buffered by the next tick.
func TestNoListenDispatchesOnTheTick(t *testing.T) {
	t.Parallel()
	pooled, direct, _ := behindPgBouncer(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	b := bundle{store: pooled, buf: buffer.New(rdb, testenv.RedisPrefix(t)), rdb: rdb}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var passes testsignal.Signal[dispatcher.Pass]
	passes.Init()
	d := newDispatcher(pooled, b.buf, dispatcher.Config{Interval: 200 * time.Millisecond, NoListen: true, OnPass: passes.Signal}, quiet)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	enqueue(t, direct, 4, nil)
	waitBuffered(t, b, &passes, 4, "the tick")
	var n int
	if err := direct.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d LISTEN sessions with NoListen (%v), want 0", n, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
