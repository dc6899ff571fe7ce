package scheduler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/scheduler"
	"github.com/taskforge/taskforge/sealer"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// bench is a store with one queue, and the scheduler loops a test starts and stops.
type bench struct {
	t     *testing.T
	store *storage.Store
	lc    *lifecycle.Lifecycle
	wakes *wakes
	log   *syncBuffer // the lifecycle's transition log, JSON lines
	fired chan storage.Fired
	mu    sync.Mutex
	loops map[int]*loop
	next  int
}

type loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newBench(t *testing.T) *bench {
	t.Helper()
	store := testenv.NewStore(t)
	if _, err := store.CreateQueue(context.Background(), storage.Queue{Name: "q", MaxRetries: 3, BackoffBaseMs: 1000, BackoffMaxMs: 60000}); err != nil {
		t.Fatal(err)
	}
	return benchOf(t, store)
}

// benchOf returns a bench on store, its scheduler loops firing through a lifecycle
// over store and a buffer of the test's own on the shared Redis.
func benchOf(t *testing.T, store *storage.Store) *bench {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	w, log := &wakes{}, &syncBuffer{}
	lc := lifecycle.New(store, buffer.New(rdb, testenv.RedisPrefix(t)), w,
		lifecycle.Config{Telemetry: telemetry.New(slog.New(slog.NewJSONHandler(log, nil)))}, slog.New(slog.DiscardHandler))
	b := &bench{t: t, store: store, lc: lc, wakes: w, log: log, fired: make(chan storage.Fired, 1000), loops: map[int]*loop{}}
	t.Cleanup(b.stopAll)
	return b
}

// create makes a schedule as the API does: NextRunAt from the database clock.
func (b *bench) create(name, cron string) storage.Schedule {
	b.t.Helper()
	ctx := context.Background()
	now, err := b.store.Now(ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	sch := storage.Schedule{Name: name, Queue: "q", Cron: cron, Timezone: "UTC", Payload: json.RawMessage(`{"tick":true}`), Priority: 5}
	if err := scheduler.Reschedule(&sch, now); err != nil {
		b.t.Fatal(err)
	}
	out, err := b.store.CreateSchedule(ctx, sch)
	if err != nil {
		b.t.Fatal(err)
	}
	return out
}

// start runs one more scheduler loop, as a replica would, and returns its id.
func (b *bench) start() int {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loop{cancel: cancel, done: make(chan struct{})}
	s := scheduler.New(b.store, recorder{b.lc, b.fired}, scheduler.Config{}, slog.New(slog.DiscardHandler))
	go func() {
		defer close(l.done)
		_ = s.Run(ctx)
	}()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	b.loops[b.next] = l
	return b.next
}

// recorder is the lifecycle's Firer, telling fired of every tick fired, after its
// commit and follow-ups (tests wait on it instead of sleeping).
type recorder struct {
	scheduler.Firer
	fired chan<- storage.Fired
}

func (r recorder) FireDueSchedule(ctx context.Context, plan storage.PlanFunc, skip []string) (storage.Fired, bool, error) {
	f, ok, err := r.Firer.FireDueSchedule(ctx, plan, skip)
	if err == nil && ok {
		r.fired <- f
	}
	return f, ok, err
}

// wakes is the lifecycle's Waker: it records the queues the dispatcher was told of.
type wakes struct {
	mu     sync.Mutex
	queues []string
}

func (w *wakes) Wake(queue string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queues = append(w.queues, queue)
}

func (w *wakes) WakeLow(string) {}

// take returns the queues woken since the last take.
func (w *wakes) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues
	w.queues = nil
	return q
}

// syncBuffer is a bytes.Buffer that loops may write while a test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// transitions returns the transition log lines of task id.
func (b *syncBuffer) transitions(t *testing.T, id string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "task transition" && rec["task_id"] == id {
			out = append(out, rec)
		}
	}
	return out
}

// stop cancels loop id (mid-transaction, perhaps) and waits for it to end.
func (b *bench) stop(id int) {
	b.mu.Lock()
	l := b.loops[id]
	delete(b.loops, id)
	b.mu.Unlock()
	if l != nil {
		l.cancel()
		<-l.done
	}
}

func (b *bench) stopAll() {
	b.mu.Lock()
	ids := make([]int, 0, len(b.loops))
	for id := range b.loops {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	for _, id := range ids {
		b.stop(id)
	}
}

// await returns the next tick fired by any loop, failing after 5 s (a tick is 1 s).
func (b *bench) await() storage.Fired {
	b.t.Helper()
	select {
	case f := <-b.fired:
		return f
	case <-time.After(5 * time.Second):
		b.t.Fatal("no tick fired within 5 s")
		return storage.Fired{}
	}
}

// ticks returns the scheduled_at of every task schedule created, in order, checking
// from PostgreSQL that no tick has two tasks.
func (b *bench) ticks(schedule string) []time.Time {
	b.t.Helper()
	ctx := context.Background()
	rows, err := b.store.Pool().Query(ctx, `SELECT scheduled_at FROM all_tasks WHERE schedule = $1 ORDER BY scheduled_at`, schedule)
	if err != nil {
		b.t.Fatal(err)
	}
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			b.t.Fatal(err)
		}
		out = append(out, at.UTC())
	}
	if err := rows.Err(); err != nil {
		b.t.Fatal(err)
	}
	var distinct, keys int
	if err := b.store.Pool().QueryRow(ctx, `SELECT count(DISTINCT scheduled_at), count(DISTINCT idempotency_key) FROM all_tasks WHERE schedule = $1`,
		schedule).Scan(&distinct, &keys); err != nil {
		b.t.Fatal(err)
	}
	if distinct != len(out) || keys != len(out) {
		b.t.Fatalf("%d tasks for %d distinct ticks and %d distinct keys: a tick fired twice", len(out), distinct, keys)
	}
	return out
}

// waitDBPast polls the database clock (no sleeping through a guess) until it passes at.
func (b *bench) waitDBPast(at time.Time) {
	b.t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		now, err := b.store.Now(context.Background())
		if err != nil {
			b.t.Fatal(err)
		}
		if now.After(at) {
			return
		}
		<-tick.C
	}
}

func checkCadence(t *testing.T, ticks []time.Time, from int) {
	t.Helper()
	for i := from + 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Errorf("ticks %d and %d are %s apart, want 1s: %v", i-1, i, d, ticks)
		}
	}
}

// TestExactlyOneTaskPerTickWhileReplicasDieAndReturn runs three scheduler loops on
// one @every 1s schedule for 15 ticks, cancelling one loop after every tick (in the
// middle of whatever it was doing) and starting a new one, so at least two always
// run: every tick has exactly one task, and none is missed.
func TestExactlyOneTaskPerTickWhileReplicasDieAndReturn(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	sch := b.create("every-second", "@every 1s")
	first := *sch.NextRunAt
	ids := []int{b.start(), b.start(), b.start()}
	var lateness []time.Duration
	const want = 15
	for n := 0; n < want; n++ {
		f := b.await()
		lateness = append(lateness, f.At.Sub(f.Tick))
		victim := ids[n%len(ids)]
		b.stop(victim)
		ids[n%len(ids)] = b.start()
		if n%5 == 4 { // now and then two die at once, one returning
			b.stop(ids[(n+1)%len(ids)])
			ids[(n+1)%len(ids)] = b.start()
		}
	}
	b.stopAll()

	ticks := b.ticks("every-second")
	if len(ticks) < want {
		t.Fatalf("%d tasks, want at least %d", len(ticks), want)
	}
	if !ticks[0].Equal(first) {
		t.Errorf("first task at %s, want the first tick %s", ticks[0], first)
	}
	checkCadence(t, ticks, 0)
	got, err := b.store.GetSchedule(context.Background(), "every-second")
	if err != nil {
		t.Fatal(err)
	}
	last := ticks[len(ticks)-1]
	if got.NextRunAt == nil || !got.NextRunAt.Equal(last.Add(time.Second)) {
		t.Errorf("next_run_at %v, want %s", got.NextRunAt, last.Add(time.Second))
	}
	sort.Slice(lateness, func(i, j int) bool { return lateness[i] < lateness[j] })
	t.Logf("%d ticks; lateness (tick to commit) median %s, max %s", len(ticks), lateness[len(lateness)/2], lateness[len(lateness)-1])
	if lateness[len(lateness)-1] > time.Second {
		t.Errorf("a tick fired %s late; with a loop always running it should be well under 1 s", lateness[len(lateness)-1])
	}
}

// TestMissedTicksCollapseIntoOne stops every loop for five ticks: the loop that
// returns enqueues one task, for the most recent missed tick, then the cadence resumes.
func TestMissedTicksCollapseIntoOne(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.create("catch-up", "@every 1s")
	id := b.start()
	b.await()
	lastBefore := b.await().Tick
	b.stop(id)
	// Ticks lastBefore+1s … lastBefore+5s pass with nobody running.
	b.waitDBPast(lastBefore.Add(5*time.Second + 300*time.Millisecond))
	b.start()
	catchUp := b.await()
	if catchUp.Tick.Before(lastBefore.Add(5 * time.Second)) {
		t.Fatalf("catch-up task for tick %s, want the most recent missed one (≥ %s)", catchUp.Tick, lastBefore.Add(5*time.Second))
	}
	after := b.await()
	b.await()
	b.stopAll()
	if !after.Tick.Equal(catchUp.Tick.Add(time.Second)) {
		t.Errorf("after the catch-up tick %s came %s, want the next second", catchUp.Tick, after.Tick)
	}
	ticks := b.ticks("catch-up")
	i := slices.IndexFunc(ticks, func(at time.Time) bool { return at.Equal(lastBefore) })
	if i < 0 || i+1 >= len(ticks) || !ticks[i+1].Equal(catchUp.Tick) {
		t.Fatalf("tasks %v: want exactly one task between %s and the catch-up tick %s", ticks, lastBefore, catchUp.Tick)
	}
	checkCadence(t, ticks, i+1)
}

// TestPausedFiresNothingAndResumeFiresFromTheNextTick pauses a running schedule for
// more than two ticks, then resumes it.
func TestPausedFiresNothingAndResumeFiresFromTheNextTick(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.create("pausable", "@every 1s")
	b.start()
	b.await()
	ctx := context.Background()
	paused, err := b.store.UpdateSchedule(ctx, "pausable", func(sch *storage.Schedule, now time.Time) error {
		sch.Paused = true
		return scheduler.Reschedule(sch, now)
	})
	if err != nil {
		t.Fatal(err)
	}
	if paused.NextRunAt != nil {
		t.Errorf("paused schedule has next_run_at %s", paused.NextRunAt)
	}
	drain(b.fired) // a tick that committed before the pause
	before := len(b.ticks("pausable"))
	b.waitDBPast(paused.UpdatedAt.Add(2500 * time.Millisecond))
	select {
	case f := <-b.fired:
		t.Fatalf("paused schedule fired tick %s", f.Tick)
	default:
	}
	if n := len(b.ticks("pausable")); n != before {
		t.Fatalf("%d tasks while paused, had %d", n, before)
	}
	var resumedAt time.Time
	resumed, err := b.store.UpdateSchedule(ctx, "pausable", func(sch *storage.Schedule, now time.Time) error {
		resumedAt = now
		sch.Paused = false
		return scheduler.Reschedule(sch, now)
	})
	if err != nil {
		t.Fatal(err)
	}
	f := b.await()
	b.stopAll()
	if !f.Tick.Equal(*resumed.NextRunAt) || !f.Tick.After(resumedAt) {
		t.Errorf("first tick after resume %s, want %s (after the resume at %s)", f.Tick, resumed.NextRunAt, resumedAt)
	}
	if n := len(b.ticks("pausable")); n != before+1 {
		t.Errorf("%d tasks after resume, want %d: the paused ticks must not fire", n, before+1)
	}
}

// TestFiredTickFollowsUpAsATrigger: the loop fires through the lifecycle, so a fired
// tick and a manual trigger have the same follow-ups: the dispatcher told of the
// queue at once (not only by NOTIFY, which a LISTEN-less replica never hears) and
// the task's transition logged.
func TestFiredTickFollowsUpAsATrigger(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.create("followed", "@every 1s")
	b.start()
	fired := b.await()
	b.stopAll()
	firedWakes := b.wakes.take()
	task, err := b.lc.TriggerSchedule(context.Background(), "followed")
	if err != nil {
		t.Fatal(err)
	}
	triggerWakes := b.wakes.take()
	for _, c := range []struct {
		how   string
		id    string
		wakes []string
	}{{"fired", fired.Task.ID.String(), firedWakes}, {"triggered", task.ID.String(), triggerWakes}} {
		if !slices.Contains(c.wakes, "q") {
			t.Errorf("%s task: dispatcher told of %v, want q", c.how, c.wakes)
		}
		trs := b.log.transitions(t, c.id)
		if len(trs) != 1 || trs[0]["queue"] != "q" || trs[0]["to_status"] != storage.StatusPending ||
			!strings.HasPrefix(fmt.Sprint(trs[0]["reason"]), "schedule followed") {
			t.Errorf("%s task: transitions %v, want one to pending in q for schedule followed", c.how, trs)
		}
	}
}

// TestTriggerLeavesTheTickAlone: a run now gets its own task; the cadence is unchanged.
func TestTriggerLeavesTheTickAlone(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	sch := b.create("daily", "0 3 * * *")
	ctx := context.Background()
	got, task, err := b.store.TriggerSchedule(ctx, "daily")
	if err != nil {
		t.Fatal(err)
	}
	if task.Schedule == nil || *task.Schedule != "daily" || task.Status != storage.StatusPending || string(task.Payload) != `{"tick": true}` {
		t.Errorf("triggered task %+v", task)
	}
	after, err := b.store.GetSchedule(ctx, "daily")
	if err != nil {
		t.Fatal(err)
	}
	if !after.NextRunAt.Equal(*sch.NextRunAt) || after.LastTaskID == nil || *after.LastTaskID != task.ID || got.Name != "daily" {
		t.Errorf("after trigger: %+v", after)
	}
	if _, _, err := b.store.TriggerSchedule(ctx, "nope"); err == nil {
		t.Error("trigger of a missing schedule succeeded")
	}
}

func drain(ch chan storage.Fired) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestSealedSchedulesFireReadableTasks: with encryption at rest the schedule's payload
// is stored sealed, and its ticks' tasks carry the plain payload, sealed for their queue.
func TestSealedSchedulesFireReadableTasks(t *testing.T) {
	t.Parallel()
	plain := testenv.NewStore(t)
	sl, err := sealer.New([]sealer.Key{{ID: "k1", Secret: bytes.Repeat([]byte{7}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	store := storage.New(plain.Pool(), storage.WithSealer(sl))
	b := benchOf(t, store)
	ctx := context.Background()
	if _, err := store.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 3, BackoffBaseMs: 1000, BackoffMaxMs: 60000}); err != nil {
		t.Fatal(err)
	}
	b.create("secret", "@every 1s")
	var raw string
	if err := store.Pool().QueryRow(ctx, `SELECT payload::text FROM schedules WHERE name = 'secret'`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(raw, "taskforge_sealed") || strings.Contains(raw, "tick") {
		t.Fatalf("schedule payload stored as %s, want it sealed", raw)
	}
	b.start()
	f := b.await()
	b.stopAll()
	task, _, err := store.GetTask(ctx, "q", f.Task.ID)
	var payload map[string]bool
	if err != nil || json.Unmarshal(task.Payload, &payload) != nil || !payload["tick"] {
		t.Fatalf("fired task payload %s (%v)", task.Payload, err)
	}
}

// TestAFailingScheduleDoesNotHoldUpTheOthers: a schedule that cannot fire (its
// payload was sealed with a key this replica lacks) is the most overdue one, yet the
// healthy schedule behind it fires on time.
func TestAFailingScheduleDoesNotHoldUpTheOthers(t *testing.T) {
	t.Parallel()
	plain := testenv.NewStore(t)
	key := func(id string, b byte) *sealer.Sealer {
		sl, err := sealer.New([]sealer.Key{{ID: id, Secret: bytes.Repeat([]byte{b}, 32)}})
		if err != nil {
			t.Fatal(err)
		}
		return sl
	}
	ctx := context.Background()
	old := benchOf(t, storage.New(plain.Pool(), storage.WithSealer(key("old", 1))))
	cur := benchOf(t, storage.New(plain.Pool(), storage.WithSealer(key("new", 2))))
	if _, err := cur.store.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 3, BackoffBaseMs: 1000, BackoffMaxMs: 60000}); err != nil {
		t.Fatal(err)
	}
	old.create("unreadable", "@every 1s")
	cur.create("healthy", "@every 1s")
	if _, err := plain.Pool().Exec(ctx, `UPDATE schedules SET next_run_at = next_run_at - interval '1 hour' WHERE name = 'unreadable'`); err != nil {
		t.Fatal(err)
	}
	cur.start()
	for range 2 {
		if f := cur.await(); f.Schedule.Name != "healthy" {
			t.Fatalf("fired %s", f.Schedule.Name)
		}
	}
	cur.stopAll()
	if n := len(cur.ticks("unreadable")); n != 0 {
		t.Fatalf("the unreadable schedule fired %d tasks", n)
	}
	checkCadence(t, cur.ticks("healthy"), 0)
}

// TestResealSchedules: after a key rotation, ResealSchedules moves schedule payloads to
// the new key, so the old one can be dropped.
func TestResealSchedules(t *testing.T) {
	t.Parallel()
	plain := testenv.NewStore(t)
	oldKey := sealer.Key{ID: "old", Secret: bytes.Repeat([]byte{1}, 32)}
	newKey := sealer.Key{ID: "new", Secret: bytes.Repeat([]byte{2}, 32)}
	with := func(keys ...sealer.Key) *storage.Store {
		sl, err := sealer.New(keys)
		if err != nil {
			t.Fatal(err)
		}
		return storage.New(plain.Pool(), storage.WithSealer(sl))
	}
	ctx := context.Background()
	old := benchOf(t, with(oldKey))
	if _, err := old.store.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 3, BackoffBaseMs: 1000, BackoffMaxMs: 60000}); err != nil {
		t.Fatal(err)
	}
	old.create("rotated", "@daily")
	n, err := with(newKey, oldKey).ResealSchedules(ctx)
	if err != nil || n != 1 {
		t.Fatalf("ResealSchedules: %d, %v", n, err)
	}
	sch, err := with(newKey).GetSchedule(ctx, "rotated")
	if err != nil || !strings.Contains(string(sch.Payload), "tick") {
		t.Fatalf("with the new key alone: %s, %v", sch.Payload, err)
	}
	if n, err := with(newKey).ResealSchedules(ctx); err != nil || n != 0 {
		t.Fatalf("second pass: %d, %v", n, err)
	}
}
