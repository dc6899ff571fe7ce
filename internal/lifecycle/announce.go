package lifecycle

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
)

// announceTimeout bounds one publish of the announcer, so a Redis that hangs holds
// up announcements, never a shutdown.
const announceTimeout = 5 * time.Second

// announcer tells other replicas of tasks that ended, off the request path: an ack
// hands its task id over and answers at once, and one goroutine (Run) publishes
// whatever has gathered since its last publish in one message. Nothing waits on a
// timer: when idle, an id is published as soon as the goroutine runs; under load,
// the ids that arrive during one publish share the next. The done channel is a hint
// (a lost message only delays a waiter elsewhere until its deadline), so an id
// handed over is never retried.
//
// While Run is not running (before it starts, and once it has stopped) ids are
// published by the caller, as before: nothing is left behind at a shutdown.
type announcer struct {
	publish func(ctx context.Context, ids ...uuid.UUID) error
	log     *slog.Logger

	mu      sync.Mutex
	running bool
	pending []uuid.UUID
	signal  chan struct{} // capacity 1: pending holds ids

	// beforePublish, set only by tests (hooks.go), runs before each publish of Run.
	beforePublish func(ids int)
}

func newAnnouncer(publish func(ctx context.Context, ids ...uuid.UUID) error, log *slog.Logger) *announcer {
	return &announcer{publish: publish, log: log, signal: make(chan struct{}, 1)}
}

// announce has ids published: by Run when it runs, else at once by the caller.
func (a *announcer) announce(ctx context.Context, ids []uuid.UUID) {
	a.mu.Lock()
	if !a.running {
		a.mu.Unlock()
		a.send(context.WithoutCancel(ctx), ids)
		return
	}
	a.pending = append(a.pending, ids...)
	a.mu.Unlock()
	select {
	case a.signal <- struct{}{}:
	default: // Run has been signalled already and will take these too
	}
}

// run publishes handed-over ids until ctx is done, then publishes what is left and
// hands publishing back to the callers. It returns nil.
func (a *announcer) run(ctx context.Context) error {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		<-ctx.Done() // another Run publishes; this one only waits
		return nil
	}
	a.running = true
	a.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	for {
		select {
		case <-ctx.Done():
			a.mu.Lock()
			a.running = false
			ids := a.pending
			a.pending = nil
			a.mu.Unlock()
			a.flush(bg, ids)
			return nil
		case <-a.signal:
			a.mu.Lock()
			ids := a.pending
			a.pending = nil
			a.mu.Unlock()
			a.flush(bg, ids)
		}
	}
}

func (a *announcer) flush(ctx context.Context, ids []uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	if a.beforePublish != nil {
		a.beforePublish(len(ids))
	}
	a.send(ctx, ids)
}

func (a *announcer) send(ctx context.Context, ids []uuid.UUID) {
	ctx, cancel := context.WithTimeout(ctx, announceTimeout)
	defer cancel()
	if err := a.publish(ctx, ids...); err != nil {
		a.log.Warn("finished tasks not announced; other replicas' waiters answer at their deadline",
			"tasks", len(ids), "err", err)
	}
}

// Run announces ended tasks to the other replicas off the request path until ctx
// is done, then announces what is left; transitions made while it does not run
// announce their own. It returns nil.
func (l *Lifecycle) Run(ctx context.Context) error { return l.announcer.run(ctx) }
