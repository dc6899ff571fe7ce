package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/storage"
)

// doneListener hears the done channel as another replica does.
type doneListener struct {
	ch <-chan *redis.Message
}

func listenDone(t *testing.T, b bundle) doneListener {
	t.Helper()
	sub := b.rdb.Subscribe(context.Background(), b.buf.DoneChannel())
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(context.Background()); err != nil { // the subscription is in place
		t.Fatal(err)
	}
	return doneListener{ch: sub.Channel()}
}

// hear waits for announcements until every id of want was heard.
func (d doneListener) hear(t *testing.T, want ...uuid.UUID) {
	t.Helper()
	left := map[uuid.UUID]bool{}
	for _, id := range want {
		left[id] = true
	}
	timeout := time.After(10 * time.Second) // a failure bound, not a synchronisation
	for len(left) > 0 {
		select {
		case msg := <-d.ch:
			for _, id := range buffer.ParseDone(msg.Payload) {
				delete(left, id)
			}
		case <-timeout:
			t.Fatalf("%d of %d ended tasks never announced", len(left), len(want))
		}
	}
}

// ackOne enqueues, claims and acks one task and returns its id.
func ackOne(t *testing.T, b bundle) uuid.UUID {
	t.Helper()
	b.enqueue(t, 1)
	tasks := b.claim(t, "w")
	if len(tasks) != 1 {
		t.Fatalf("claimed %d tasks", len(tasks))
	}
	if _, err := b.lc.Ack(context.Background(), storage.AckItem{TaskID: tasks[0].ID, LeaseToken: *tasks[0].LeaseToken, WorkerID: "w"}); err != nil {
		t.Fatal(err)
	}
	return tasks[0].ID
}

// An ack answers before its task's end is published to the other replicas: the
// publish runs on Run's goroutine, here held up until the ack has returned.
func TestAckAnnouncesOffTheRequestPath(t *testing.T) {
	b := setup(t)
	done := listenDone(t, b)
	hold := make(chan struct{})
	lifecycle.SetBeforeAnnounce(b.lc, func(int) { <-hold })
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- b.lc.Run(ctx) }()

	id := ackOne(t, b) // returns although the publish is held
	close(hold)
	done.hear(t, id)
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// A local waiter is woken by the ack at once, whatever the announcer does.
func TestAckWakesLocalWaiterWithoutPublish(t *testing.T) {
	b := setup(t)
	hold := make(chan struct{})
	defer close(hold)
	lifecycle.SetBeforeAnnounce(b.lc, func(int) { <-hold })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = b.lc.Run(ctx) }()

	ids := b.enqueue(t, 1)
	ended, leave := b.lc.AwaitEnd(ids[0])
	defer leave()
	tasks := b.claim(t, "w")
	if _, err := b.lc.Ack(context.Background(), storage.AckItem{TaskID: tasks[0].ID, LeaseToken: *tasks[0].LeaseToken, WorkerID: "w"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	default:
		t.Fatal("the local waiter was not woken by the ack")
	}
}

// Ids handed over while a publish is in flight are published together after it, and
// those still waiting when Run is stopped are published before it returns; once it
// has returned, an ack publishes its own.
func TestAnnouncerFlushesAtShutdown(t *testing.T) {
	b := setup(t)
	done := listenDone(t, b)
	entered := make(chan int)
	hold := make(chan struct{})
	lifecycle.SetBeforeAnnounce(b.lc, func(n int) {
		entered <- n
		<-hold
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- b.lc.Run(ctx) }()

	first := ackOne(t, b)
	if n := <-entered; n != 1 { // Run is publishing first, held
		t.Fatalf("first publish of %d ids", n)
	}
	second, third := ackOne(t, b), ackOne(t, b) // handed over while it is held
	cancel()
	hold <- struct{}{} // first goes out
	// Run may take second and third in one more pass or at its stop: one publish
	// either way.
	if n := <-entered; n != 2 {
		t.Fatalf("then a publish of %d ids, want 2", n)
	}
	close(hold)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	done.hear(t, first, second, third)

	lifecycle.SetBeforeAnnounce(b.lc, nil) // not consulted by the caller's own publish
	done.hear(t, ackOne(t, b))
}
