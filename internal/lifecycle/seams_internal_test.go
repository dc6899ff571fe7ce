package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

// fakeBroker records the follow-ups a transition sends to Redis; the Broker
// methods a test does not expect panic through the nil embedded interface.
type fakeBroker struct {
	Broker
	mu        sync.Mutex
	released  map[string][]uuid.UUID
	removed   map[string][]uuid.UUID
	published []uuid.UUID
	// groupReleased: "queue/group" -> ids freed by ReleaseGroup (fair queues).
	groupReleased map[string][]uuid.UUID
}

func (f *fakeBroker) ReleaseGroup(_ context.Context, queue, group string, ids ...uuid.UUID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.groupReleased == nil {
		f.groupReleased = map[string][]uuid.UUID{}
	}
	f.groupReleased[queue+"/"+group] = append(f.groupReleased[queue+"/"+group], ids...)
	return nil
}

func (f *fakeBroker) Release(_ context.Context, queue string, ids ...uuid.UUID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released[queue] = append(f.released[queue], ids...)
	return nil
}

func (f *fakeBroker) Remove(_ context.Context, queue string, ids ...uuid.UUID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed[queue] = append(f.removed[queue], ids...)
	return nil
}

func (f *fakeBroker) PublishDone(_ context.Context, ids ...uuid.UUID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, ids...)
	return nil
}

type fakeReclaimer []storage.Reclaimed

func (r fakeReclaimer) ReclaimExpired(context.Context, int) ([]storage.Reclaimed, error) {
	return r, nil
}

type wakes struct{ queues []string }

func (w *wakes) Wake(queue string) { w.queues = append(w.queues, queue) }
func (w *wakes) WakeLow(string)    {}

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
	rows := fakeReclaimer{
		{TaskID: retry, Queue: "q1", Attempt: 1, WorkerID: "w", Status: storage.StatusRetry, Outcome: "abandoned", StartedAt: now, EndedAt: now},
		{TaskID: dead, Queue: "q2", Attempt: 4, WorkerID: "w", Status: storage.StatusDead, Outcome: "timed_out", StartedAt: now, EndedAt: now,
			WorkflowID: &wf, Step: &step, Effects: &storage.StepEffects{WorkflowEnded: storage.WorkflowFailed,
				Cascaded: []storage.CancelledStep{{ID: sibling, Queue: "q3", Step: &sibStep, WorkflowID: &wf, FromStatus: storage.StatusBuffered}}}},
		{TaskID: cancelled, Queue: "q1", Attempt: 2, WorkerID: "w", Status: storage.StatusCancelled, Outcome: "cancelled", StartedAt: now, EndedAt: now},
		{TaskID: fairA, Queue: "fq", Attempt: 1, WorkerID: "w", Status: storage.StatusRetry, Outcome: "abandoned", StartedAt: now, EndedAt: now,
			Group: &tenant},
		{TaskID: fairUnnamed, Queue: "fq", Attempt: 1, WorkerID: "w", Status: storage.StatusRetry, Outcome: "abandoned", StartedAt: now, EndedAt: now},
	}
	broker := &fakeBroker{released: map[string][]uuid.UUID{}, removed: map[string][]uuid.UUID{}}
	w := &wakes{}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	limits := ratelimit.NewSettings(nil, quiet) // every queue set below: it never reads the store
	one, fair := 1, storage.FairnessRoundRobin
	limits.Set(storage.Queue{Name: "q1", MaxConcurrency: &one})
	limits.Set(storage.Queue{Name: "q2", MaxConcurrency: &one})
	limits.Set(storage.Queue{Name: "q3"})
	limits.Set(storage.Queue{Name: "fq", Fairness: &fair})
	l := &Lifecycle{buf: broker, reclaims: rows, wake: w, log: quiet, ended: newEndHub(), limits: limits,
		announcer: newAnnouncer(broker.PublishDone, quiet)}
	endedDead, leave := l.AwaitEnd(dead)
	defer leave()
	endedRetry, leaveRetry := l.AwaitEnd(retry)
	defer leaveRetry()

	got, err := l.Reclaim(context.Background(), 10)
	if err != nil || len(got) != 5 {
		t.Fatalf("Reclaim: %d rows (%v), want 5", len(got), err)
	}
	if slices.Sort(w.queues); !slices.Equal(slices.Compact(w.queues), []string{"fq", "q1", "q2"}) {
		t.Errorf("dispatcher told of %v, want fq, q1 and q2", w.queues)
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
