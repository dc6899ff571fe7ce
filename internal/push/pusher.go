package push

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// Broker is the worker protocol's transitions for in-process workers, with every
// follow-up (concurrency slots, telemetry, waiters, the dispatcher) done for them;
// *lifecycle.Lifecycle implements it.
type Broker interface {
	// ClaimPush pops up to want tasks of a push queue within its flow-control limits
	// and claims them for workerID with a lease of the given length; it also says
	// how long until a rate-limited queue has a token.
	ClaimPush(ctx context.Context, workerID, queue string, want int, lease time.Duration) ([]storage.Task, time.Duration, error)
	// Ack ends an attempt as succeeded, with its result (nil for none); it returns
	// storage.ErrLeaseLost (wrapped) when the lease is no longer held.
	Ack(ctx context.Context, item storage.AckItem) (storage.Task, error)
	// Nack ends an attempt as failed.
	Nack(ctx context.Context, n storage.Nack) (storage.Task, error)
}

// Parker lets a Pusher wait for work buffered for its queues; *api.Server, which
// hears the buffer's wake-ups, implements it.
type Parker interface {
	// ParkForWork waits for work buffered for one of queues: woken closes when some
	// arrives; leave must be called when done.
	ParkForWork(queues []string) (woken <-chan struct{}, leave func())
}

// Store is what a Pusher reads from PostgreSQL itself.
type Store interface {
	// PushQueues returns every queue with a push target, with its plain secret.
	PushQueues(ctx context.Context) ([]storage.Queue, error)
	// CancelRequested returns which of the executing tasks ids (under tokens) have a
	// cancel requested.
	CancelRequested(ctx context.Context, ids, tokens []uuid.UUID) ([]uuid.UUID, error)
}

// Config tunes a Pusher. Zero fields take the defaults.
type Config struct {
	// ReplicaID names this replica in the attempts' worker id, "push:<ReplicaID>".
	// Defaults to the host name and a random suffix.
	ReplicaID string
	// Concurrency bounds the requests in flight on this replica. Defaults to 64.
	Concurrency int
	// MaxPayloadBytes bounds a response body kept as the task's result. Defaults to 1 MiB.
	MaxPayloadBytes int64
	// LeaseMargin is added to a queue's timeout_ms to make each attempt's lease, so
	// the answer can be recorded after the longest request. Defaults to 5s.
	LeaseMargin time.Duration
	// RefreshInterval is how often the push queues are re-read, which bounds how
	// long a change to a queue's push target takes to apply. Defaults to 1s.
	RefreshInterval time.Duration
	// WakeFallback bounds a wait for work when no wake-up arrives (a lost pub/sub
	// message, a concurrency slot freed on another replica). Defaults to 1s.
	WakeFallback time.Duration
	// CancelCheckInterval is how often the tasks of requests in flight are checked
	// for a cancel request. Defaults to 1s.
	CancelCheckInterval time.Duration
	// StopGrace is how long requests in flight may go on once Run's context ends;
	// those still running then are aborted and retried. Defaults to 10s.
	StopGrace time.Duration
	// Client sends the requests. Defaults to a client of its own that reuses
	// connections and does not follow redirects; a given one should not either.
	Client *http.Client
	// Telemetry receives push metrics; nil disables them.
	Telemetry *telemetry.Telemetry
	// Now is the clock of signatures and Retry-After dates. Defaults to time.Now.
	Now func() time.Time
	// OnAnswer, when set, hears of every push answer recorded, after it (tests use
	// it to wait for an answer instead of polling). It runs on the request's
	// goroutine.
	OnAnswer func(Answer)
}

// Answer is a push request's answer, as recorded.
type Answer struct {
	Task    storage.Task // the task after the answer's transition
	Outcome string       // the request's outcome, as its metrics label it
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.ReplicaID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.ReplicaID = cmp.Or(host, "replica") + "-" + hex.EncodeToString(b[:])
	}
	c.Concurrency = cmp.Or(c.Concurrency, 64)
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, 1<<20)
	c.LeaseMargin = cmp.Or(c.LeaseMargin, 5*time.Second)
	c.RefreshInterval = cmp.Or(c.RefreshInterval, time.Second)
	c.WakeFallback = cmp.Or(c.WakeFallback, time.Second)
	c.CancelCheckInterval = cmp.Or(c.CancelCheckInterval, time.Second)
	c.StopGrace = cmp.Or(c.StopGrace, 10*time.Second)
	if c.Client == nil {
		c.Client = NewClient(c.Concurrency)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// NewClient returns the HTTP client pushers use: connections kept for up to
// perHost idle connections per target host, and redirects returned as answers
// rather than followed.
func NewClient(perHost int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = max(100, perHost)
	tr.MaxIdleConnsPerHost = perHost
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// Pusher delivers one replica's share of the push queues' tasks.
type Pusher struct {
	broker   Broker
	parker   Parker
	store    Store
	cfg      Config
	log      *slog.Logger
	workerID string

	inflight atomic.Int64  // tasks claimed and not yet answered
	freed    chan struct{} // a sender finished a task (buffered, 1)

	mu      sync.Mutex
	targets map[string]target // push queue → its target, as last read
	order   []string          // push queue names, by name
	running map[uuid.UUID]*attempt
	next    int // the queue the next round starts with, so none is always last

	refreshMu sync.Mutex
	refreshed time.Time // when the push queues were last read
}

// target is a push queue's target as a Pusher uses it.
type target struct {
	storage.PushTarget
	secret string // "": requests are not signed
}

// attempt is one request in flight.
type attempt struct {
	task   storage.Task
	target target
	cancel context.CancelCauseFunc
}

// New returns a Pusher that makes its transitions through broker and waits for work
// through parker; call Run to start it.
func New(broker Broker, parker Parker, store Store, cfg Config, log *slog.Logger) *Pusher {
	cfg = cfg.WithDefaults()
	return &Pusher{broker: broker, parker: parker, store: store, cfg: cfg, log: log, workerID: "push:" + cfg.ReplicaID,
		freed: make(chan struct{}, 1), targets: map[string]target{}, running: map[uuid.UUID]*attempt{}}
}

// WorkerID is the worker id of this Pusher's attempts.
func (p *Pusher) WorkerID() string { return p.workerID }

// Run delivers tasks until ctx ends, then lets requests in flight finish (for up
// to Config.StopGrace) and records their answers. It returns nil.
func (p *Pusher) Run(ctx context.Context) error {
	// Requests outlive ctx by the grace; their answers are recorded after it.
	sendCtx, stopSending := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopSending(nil)
	jobs := make(chan *attempt, p.cfg.Concurrency) // never more than Concurrency claimed
	var senders sync.WaitGroup
	for range p.cfg.Concurrency {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for a := range jobs {
				p.deliver(sendCtx, a)
			}
		}()
	}
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		p.watchCancels(ctx)
	}()

	var fed sync.WaitGroup
	for range min(feeders, p.cfg.Concurrency) {
		fed.Add(1)
		go func() {
			defer fed.Done()
			p.feed(ctx, jobs)
		}()
	}
	fed.Wait()

	close(jobs)
	stopped := make(chan struct{})
	go func() { senders.Wait(); close(stopped) }()
	grace := time.NewTimer(p.cfg.StopGrace)
	defer grace.Stop()
	select {
	case <-stopped:
	case <-grace.C:
		stopSending(errStopped)
		<-stopped
	}
	<-watchDone
	return nil
}

var (
	errStopped   = errors.New("the replica stopped mid-request")
	errCancelled = errors.New("the task was cancelled mid-request")
	errTimedOut  = errors.New("no answer within the queue's timeout_ms")
)

// feeders is how many loops claim for one Pusher's senders: while one waits for
// its claim to commit, another claims for the senders freed meanwhile, and their
// claims share the API's group commit.
const feeders = 4

// feed claims tasks for idle senders until ctx ends.
func (p *Pusher) feed(ctx context.Context, jobs chan<- *attempt) {
	for ctx.Err() == nil {
		refreshed := p.refreshIfDue(ctx)
		queues := p.queueNames()
		if len(queues) == 0 || p.cfg.Concurrency-int(p.inflight.Load()) <= 0 {
			p.sleep(ctx, p.cfg.RefreshInterval, nil) // woken by a freed sender
			continue
		}
		got, retryAfter := p.round(ctx, queues, jobs)
		if got > 0 {
			continue
		}
		// Park first, then look again, so a wake-up between the two is not lost.
		woken, leave := p.parker.ParkForWork(queues)
		got, ra := p.round(ctx, queues, jobs)
		if got == 0 {
			nap := min(p.cfg.WakeFallback, time.Until(refreshed.Add(p.cfg.RefreshInterval)))
			for _, d := range []time.Duration{retryAfter, ra} {
				if d > 0 {
					nap = min(nap, d)
				}
			}
			p.sleep(ctx, nap, woken)
		}
		leave()
	}
}

// refreshIfDue re-reads the push queues when the last read is RefreshInterval old
// (one feeder reads, the others go on), and returns when the last read was.
func (p *Pusher) refreshIfDue(ctx context.Context) time.Time {
	p.refreshMu.Lock()
	defer p.refreshMu.Unlock()
	if time.Since(p.refreshed) < p.cfg.RefreshInterval {
		return p.refreshed
	}
	if err := p.refresh(ctx); err != nil && ctx.Err() == nil {
		p.log.Warn("could not read the push queues; using the last known", "err", err)
	}
	p.refreshed = time.Now()
	return p.refreshed
}

// reserve takes up to want of the free senders and returns how many it took.
func (p *Pusher) reserve(want int) int {
	for {
		cur := p.inflight.Load()
		n := min(int64(want), int64(p.cfg.Concurrency)-cur)
		if n <= 0 {
			return 0
		}
		if p.inflight.CompareAndSwap(cur, cur+n) {
			return int(n)
		}
	}
}

// sleep waits for d, a wake-up, a freed sender or the end of ctx.
func (p *Pusher) sleep(ctx context.Context, d time.Duration, woken <-chan struct{}) {
	timer := time.NewTimer(max(d, time.Millisecond))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	case <-woken:
	case <-p.freed:
	}
}

// round claims tasks from the push queues, each queue in turn, for as many
// senders as are free, and hands them to the senders. It returns how many it
// claimed and the shortest wait a rate-limited queue asked for.
func (p *Pusher) round(ctx context.Context, queues []string, jobs chan<- *attempt) (int, time.Duration) {
	p.mu.Lock()
	start := p.next % len(queues)
	p.next++
	p.mu.Unlock()
	got := 0
	var retryAfter time.Duration
	for i := range queues {
		if ctx.Err() != nil {
			break
		}
		q := queues[(start+i)%len(queues)]
		tg, ok := p.target(q)
		if !ok {
			continue
		}
		free := p.reserve(100)
		if free == 0 {
			break
		}
		lease := time.Duration(tg.TimeoutMs)*time.Millisecond + p.cfg.LeaseMargin
		tasks, ra, err := p.broker.ClaimPush(ctx, p.workerID, q, free, lease)
		if err != nil {
			p.log.Warn("could not claim tasks of a push queue", "queue", q, "err", err)
		}
		p.inflight.Add(-int64(free - len(tasks))) // the senders not needed after all
		if ra > 0 && (retryAfter == 0 || ra < retryAfter) {
			retryAfter = ra
		}
		for _, t := range tasks {
			jobs <- &attempt{task: t, target: tg} // never blocks: each was reserved a sender
			got++
		}
	}
	return got, retryAfter
}

// refresh re-reads the push queues and their targets.
func (p *Pusher) refresh(ctx context.Context) error {
	qs, err := p.store.PushQueues(ctx)
	if err != nil {
		return err
	}
	targets := make(map[string]target, len(qs))
	order := make([]string, 0, len(qs))
	for _, q := range qs {
		if q.Push == nil {
			continue
		}
		tg := target{PushTarget: *q.Push}
		if q.PushSecret != nil {
			tg.secret = *q.PushSecret
		}
		targets[q.Name] = tg
		order = append(order, q.Name)
	}
	p.mu.Lock()
	p.targets, p.order = targets, order
	p.mu.Unlock()
	return nil
}

func (p *Pusher) queueNames() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.order
}

func (p *Pusher) target(queue string) (target, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.targets[queue]
	return t, ok
}

// done marks a task answered and lets the feeder claim another.
func (p *Pusher) done(a *attempt) {
	p.mu.Lock()
	delete(p.running, a.task.ID)
	p.mu.Unlock()
	p.inflight.Add(-1)
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// watchCancels aborts the requests whose task has a cancel requested, reading
// once per CancelCheckInterval while requests are in flight, until ctx ends.
func (p *Pusher) watchCancels(ctx context.Context) {
	tick := time.NewTicker(p.cfg.CancelCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.mu.Lock()
		ids := make([]uuid.UUID, 0, len(p.running))
		tokens := make([]uuid.UUID, 0, len(p.running))
		for id, a := range p.running {
			ids = append(ids, id)
			tokens = append(tokens, *a.task.LeaseToken)
		}
		p.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		cancelled, err := p.store.CancelRequested(ctx, ids, tokens)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("could not check push requests in flight for cancels", "err", err)
			}
			continue
		}
		p.mu.Lock()
		for _, id := range cancelled {
			if a, ok := p.running[id]; ok {
				a.cancel(errCancelled)
			}
		}
		p.mu.Unlock()
	}
}
