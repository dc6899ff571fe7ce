package client

import (
	"slices"
	"time"
)

// slots is the slot keeper: one goroutine (run) owns which tasks the worker holds
// and in what state; the poller, the executors, the reporter, the heartbeater and
// shutdown send it events and read its answers. Nothing else keeps slot state, so
// no lock guards it.
type slots struct {
	concurrency   int
	prefetch      int
	prefetchBelow time.Duration
	// autoPrefetch: Prefetch was left to its default, so the prefetch room adapts
	// (slotState.prefetchNow) from prefetch up to autoPrefetchMax.
	autoPrefetch bool
	// execute runs a job's handler; the keeper calls it (in a new goroutine) when
	// it gives the job a slot.
	execute func(*job)
	// forget is called once per job the keeper drops, after dropping it.
	forget func(*job)
	// ackAlone sends acks by themselves (the reporter's sender); the keeper calls
	// it for acks it held for a poll that did not come within pollAckHold.
	ackAlone func([]*job)

	// clock times the hold of acks left to a poll (WorkerConfig.Clock).
	clock Clock

	claimed  chan claimEvent
	returned chan returnEvent
	dropped  chan *job
	plans    chan chan pollPlan
	holding  chan chan []*job
	gone     chan chan []*job
	stopping chan chan []heldJob
	// freed wakes the poller when a slot frees (capacity 1: a wake-up, not a count).
	freed chan struct{}
	quit  <-chan struct{}
}

// jobState is where a held job stands.
type jobState int

const (
	jobWaiting   jobState = iota // prefetched: claimed, its handler not started
	jobRunning                   // its handler runs
	jobReporting                 // its handler returned; the report is on its way
)

// claimEvent is a poll's answer: the jobs it claimed, and whether it brought fewer
// than it asked for (the queue had no more due work to give it).
type claimEvent struct {
	jobs  []*job
	asked int // how many tasks the poll asked for
	short bool
	// failed: the poll failed; it claimed nothing and says nothing of the queue.
	failed bool
}

// returnEvent tells the keeper a handler returned after running for ran (0 when it
// did not run); when ackByPoll is set, the keeper may hand the ack to the next
// poll and answers whether it did.
type returnEvent struct {
	job       *job
	ran       time.Duration
	ackByPoll bool
	handed    chan bool
}

// pollPlan is what the next poll asks for: free tasks for free slots, and
// prefetch more to hold until a slot frees (want = free + prefetch).
type pollPlan struct {
	want, free, prefetch int
	acks                 []*job // acks for the poll to carry
}

// heldJob is a job shutdown takes back.
type heldJob struct {
	job       *job
	unstarted bool
}

// pollAckHold bounds how long an ack waits for the next poll while the poll in
// flight has not returned: several polls' round trips on a loaded server when the
// queue has work (10 ms let a quarter of the acks of a test under -race go
// alone), and short beside a lease, or the 30 s a poll may wait, when it has none.
// After a poll that came back short the queue has run dry, the poll in flight is
// likely waiting for work, and an ack goes at once instead (lastShort).
const pollAckHold = 50 * time.Millisecond

// autoPrefetchMax bounds the adapted prefetch room (WorkerConfig.Prefetch left to
// its default) together with the slots: two full polls' worth of tasks, so that
// the next full poll can be out while a full poll's worth still runs.
const autoPrefetchMax = 2 * maxPollTasks

// maxPollsInFlight is how many polls the worker keeps out at once. A second poll
// goes only while handlers run short and the queue has work, and only for a
// room worth a poll (pollWorth), so that the next tasks are on their way while
// the server still answers the first.
const maxPollsInFlight = 2

func newSlots(cfg WorkerConfig, autoPrefetch bool, execute func(*job), forget func(*job), ackAlone func([]*job), quit <-chan struct{}) *slots {
	return &slots{concurrency: cfg.Concurrency, prefetch: cfg.Prefetch, prefetchBelow: cfg.PrefetchBelow,
		autoPrefetch: autoPrefetch && cfg.Prefetch > 0, execute: execute, forget: forget, ackAlone: ackAlone, clock: cfg.Clock,
		claimed: make(chan claimEvent), returned: make(chan returnEvent), dropped: make(chan *job),
		plans: make(chan chan pollPlan), holding: make(chan chan []*job), gone: make(chan chan []*job),
		stopping: make(chan chan []heldJob), freed: make(chan struct{}, 1), quit: quit}
}

// slotState is the keeper's own state; only run touches it.
type slotState struct {
	active    map[*job]jobState // tasks held: prefetched, running, or being reported
	waiting   []*job            // prefetched jobs, in the order claimed
	running   int               // active jobs whose handler was started and has not returned
	reporting int               // active jobs whose handler returned (their report is on its way)
	stopping  bool              // shutdown is handing tasks back: start no more
	// A handler returning leaves its ack to the next poll (pollAcks), saving a
	// request per task and, on the server, a commit: the poll commits its acks
	// with its claim. The poll its freed slot sets off, when the poller is idle;
	// otherwise the one after the poll in flight, and when that one has not taken
	// them within pollAckHold (it is waiting for work), they go alone (holdUntil).
	pollerIdle bool
	pollerGone bool // the poll loop has ended: acks go alone
	// ackPollOut: the poll in flight carries acks, so the server answers it without
	// waiting for work and the next poll follows at once.
	ackPollOut bool
	// lastShort: the last poll answered brought fewer tasks than it asked for, so
	// the one in flight, unless it carries acks, is likely waiting for work: acks
	// go alone at once.
	lastShort bool
	pollAcks  []*job
	holdUntil <-chan time.Time // set while pollAcks wait for a poll in flight, or for one deferred
	avgRun    time.Duration    // moving average of handler durations; 0 until one returned
	// prefetchNow is the prefetch room the next poll may fill: Prefetch, or when
	// it adapts (autoPrefetch), from Prefetch up to autoPrefetchMax less the
	// slots. It doubles when a full poll comes back after the slots ran dry
	// while the queue had work (starved), and shrinks by a quarter when one
	// comes back with tasks still waiting; a short poll (the queue ran dry) sets
	// it back to Prefetch.
	prefetchNow int
	starved     bool
	// deferred: the poller is parked because the room was too small to be worth
	// a poll while prefetched tasks wait; forcePoll: the hold of acks ran out
	// meanwhile, so the next poll goes whatever its size.
	deferred, forcePoll bool
	// inFlight polls are out, asking for asked tasks in all: the room they may
	// fill is taken until they are answered.
	inFlight, asked int
}

// run serves events until quit closes.
func (s *slots) run() {
	st := &slotState{active: map[*job]jobState{}, prefetchNow: s.prefetch}
	for {
		select {
		case <-st.holdUntil:
			st.holdUntil = nil
			if st.deferred && st.inFlight < maxPollsInFlight {
				// The poller waits for room: send the acks with a poll now.
				st.forcePoll = true
				s.wakePoller()
				continue
			}
			acks := st.pollAcks
			st.pollAcks = nil
			s.ackAlone(acks)
		case ev := <-s.claimed:
			st.inFlight--
			st.asked -= ev.asked
			if ev.failed {
				s.wakePoller()
				continue
			}
			s.adaptPrefetch(st, ev.short)
			st.lastShort = ev.short
			for _, j := range ev.jobs {
				st.active[j] = jobWaiting
				st.waiting = append(st.waiting, j)
			}
			s.startWaiting(st)
		case ev := <-s.returned:
			ev.handed <- s.handlerReturned(st, ev)
			s.startWaiting(st)
			s.wakePoller()
		case j := <-s.dropped:
			s.drop(st, j)
			s.startWaiting(st)
			s.wakePoller()
		case reply := <-s.plans:
			reply <- s.planPoll(st)
		case reply := <-s.holding:
			var jobs []*job
			for j, state := range st.active {
				if state != jobReporting {
					jobs = append(jobs, j)
				}
			}
			reply <- jobs
		case reply := <-s.gone:
			st.pollerGone = true
			acks := st.pollAcks
			st.pollAcks = nil
			st.stopHold()
			reply <- acks
		case reply := <-s.stopping:
			st.stopping = true
			held := make([]heldJob, 0, len(st.active))
			for j, state := range st.active {
				held = append(held, heldJob{job: j, unstarted: state == jobWaiting})
			}
			reply <- held
		case <-s.quit:
			return
		}
	}
}

// pollSize is how many tasks the next poll asks for: the free slots, and while
// handlers run short, the room left for prefetched tasks, in one poll (at most
// maxPollTasks, free slots first). Tasks whose handler returned but whose ack or
// nack is still on its way hold no slot, so the next poll overlaps with their
// report.
func (s *slots) pollSize(st *slotState) (free, prefetch int) {
	// The tasks of the polls out count as waiting: they may all come.
	waiting := len(st.waiting) + st.asked
	free = max(s.concurrency-st.running-waiting, 0)
	if s.prefetching(st) {
		// Waiting jobs beyond the slots they will fill are prefetched ones.
		prefetch = max(st.prefetchNow-max(waiting+st.running-s.concurrency, 0), 0)
	}
	free = min(free, maxPollTasks)
	return free, min(prefetch, maxPollTasks-free)
}

// prefetching reports whether the worker prefetches now: it may, and its
// handlers run short.
func (s *slots) prefetching(st *slotState) bool {
	return s.prefetch > 0 && st.avgRun > 0 && st.avgRun < s.prefetchBelow
}

// planPoll is the next poll: what it asks for and the acks it carries; or, when
// no poll goes now (want 0), the acks to send alone, if any.
func (s *slots) planPoll(st *slotState) pollPlan {
	p := pollPlan{}
	p.free, p.prefetch = s.pollSize(st)
	p.want = p.free + p.prefetch
	if p.want > 0 && s.pollNow(st, p.want) {
		st.forcePoll, st.pollerIdle, st.deferred = false, false, false
		st.inFlight++
		st.asked += p.want
		p.acks, st.pollAcks = st.pollAcks, nil
		st.ackPollOut = len(p.acks) > 0
		st.stopHold()
		return p
	}
	want := p.want
	p = pollPlan{}
	// Idle: nothing to ask for and no poll out; a freed slot sets off the next
	// poll at once, and it carries the acks of the handlers returned meanwhile.
	st.pollerIdle = st.inFlight == 0 && want <= 0
	// Deferred: tasks wait to run, or a poll is out, and the room is small (a
	// poll for it would cost a round trip for a few tasks): wait for more room,
	// for the waiting tasks to run out or for the poll out to come back, and
	// keep the acks for the poll that follows, within pollAckHold.
	st.deferred = !st.pollerIdle
	if st.forcePoll || st.pollerIdle {
		st.forcePoll = false
		p.acks, st.pollAcks = st.pollAcks, nil
		st.stopHold()
		return p
	}
	if len(st.pollAcks) > 0 && st.holdUntil == nil {
		st.holdUntil = s.clock.After(pollAckHold)
	}
	return p
}

// pollNow reports whether a poll for want tasks goes now. With no poll out, a
// poll goes unless more tasks wait at hand than it would bring and it would
// fill less than half the room of the slots and the prefetch: those tasks keep
// the slots busy while the room grows to a poll worth its round trip. A second
// poll goes only while handlers run short and the queue has work, and only for
// half that room (at most a full poll). The hold of acks for a poll forces one
// (forcePoll), within maxPollsInFlight.
func (s *slots) pollNow(st *slotState, want int) bool {
	worth := want >= min((s.concurrency+st.prefetchNow)/2, maxPollTasks)
	switch {
	case st.inFlight >= maxPollsInFlight:
		return false
	case st.forcePoll:
		return true
	case st.inFlight == 0:
		return worth || len(st.waiting) <= want || !s.prefetching(st)
	}
	return worth && !st.lastShort && s.prefetching(st)
}

// adaptPrefetch adapts the prefetch room to a poll's answer (see
// slotState.prefetchNow), when it adapts at all.
func (s *slots) adaptPrefetch(st *slotState, short bool) {
	if !s.autoPrefetch {
		return
	}
	switch {
	case short:
		st.prefetchNow = s.prefetch
	case st.starved:
		st.prefetchNow = min(st.prefetchNow*2, max(autoPrefetchMax-s.concurrency, s.prefetch))
	case len(st.waiting) > 0:
		st.prefetchNow = max(st.prefetchNow-st.prefetchNow/4, s.prefetch)
	}
	st.starved = false
}

// handlerReturned frees ev.job's slot while its outcome is reported, and folds the
// handler's duration into the average that decides whether to prefetch. It
// reports whether the next poll carries the job's ack.
func (s *slots) handlerReturned(st *slotState, ev returnEvent) (handed bool) {
	switch {
	case ev.ran <= 0: // the handler did not run
	case st.avgRun == 0:
		st.avgRun = ev.ran
	default:
		st.avgRun += (ev.ran - st.avgRun) / 5
	}
	if state, ok := st.active[ev.job]; ok && state == jobRunning {
		st.active[ev.job] = jobReporting
		st.running--
		st.reporting++
		if ev.ackByPoll && !st.pollerGone && len(st.pollAcks) < maxPollTasks && (st.pollerIdle || st.ackPollOut || !st.lastShort) {
			st.pollAcks = append(st.pollAcks, ev.job)
			handed = true
			if !st.pollerIdle && st.holdUntil == nil {
				st.holdUntil = s.clock.After(pollAckHold)
			}
		}
	}
	return handed
}

// stopHold ends the wait of held acks (they left with a poll, or will go alone).
func (st *slotState) stopHold() { st.holdUntil = nil }

// drop forgets j, releasing its slot.
func (s *slots) drop(st *slotState, j *job) {
	state, ok := st.active[j]
	if !ok {
		return
	}
	switch state {
	case jobWaiting:
		st.waiting = slices.DeleteFunc(st.waiting, func(w *job) bool { return w == j })
	case jobRunning:
		st.running--
	case jobReporting:
		st.reporting--
	}
	delete(st.active, j)
	s.forget(j)
}

// startWaiting starts prefetched tasks, in the order claimed, while slots are free.
func (s *slots) startWaiting(st *slotState) {
	for len(st.waiting) > 0 && st.running < s.concurrency && !st.stopping {
		j := st.waiting[0]
		st.waiting[0] = nil
		st.waiting = st.waiting[1:]
		st.active[j] = jobRunning
		st.running++
		go s.execute(j)
	}
	if st.running < s.concurrency && len(st.waiting) == 0 && !st.lastShort && !st.stopping {
		// A slot idles while the queue has work: the prefetch room did not last
		// until the next poll's answer.
		st.starved = true
	}
}

func (s *slots) wakePoller() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// claim hands the keeper the jobs a poll claimed (each runs as soon as a slot is
// free) and whether the poll came back short of what it asked for.
func (s *slots) claim(jobs []*job, asked int, short bool) {
	s.claimed <- claimEvent{jobs: jobs, asked: asked, short: short}
}

// pollFailed tells the keeper a poll that asked for asked tasks failed.
func (s *slots) pollFailed(asked int) { s.claimed <- claimEvent{asked: asked, failed: true} }

// handlerDone tells the keeper j's handler returned (see handlerReturned).
func (s *slots) handlerDone(j *job, ran time.Duration, ackByPoll bool) (handed bool) {
	ev := returnEvent{job: j, ran: ran, ackByPoll: ackByPoll, handed: make(chan bool, 1)}
	s.returned <- ev
	return <-ev.handed
}

// done tells the keeper j is reported (or given up): its slot is free.
func (s *slots) done(j *job) { s.dropped <- j }

// plan asks what the next poll should ask for, and takes the acks it carries.
func (s *slots) plan() pollPlan {
	reply := make(chan pollPlan, 1)
	s.plans <- reply
	return <-reply
}

// beating lists the jobs whose leases the heartbeater keeps: those waiting or
// running.
func (s *slots) beating() []*job {
	reply := make(chan []*job, 1)
	s.holding <- reply
	return <-reply
}

// pollerGone tells the keeper the poll loop ended, and takes back the acks left
// for a poll that will not come.
func (s *slots) pollerGone() []*job {
	reply := make(chan []*job, 1)
	s.gone <- reply
	return <-reply
}

// stop tells the keeper to start no more handlers, and lists every job held.
func (s *slots) stop() []heldJob {
	reply := make(chan []heldJob, 1)
	s.stopping <- reply
	return <-reply
}
