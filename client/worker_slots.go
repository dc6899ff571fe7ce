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
	short bool
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

func newSlots(cfg WorkerConfig, execute func(*job), forget func(*job), ackAlone func([]*job), quit <-chan struct{}) *slots {
	return &slots{concurrency: cfg.Concurrency, prefetch: cfg.Prefetch, prefetchBelow: cfg.PrefetchBelow,
		execute: execute, forget: forget, ackAlone: ackAlone, clock: cfg.Clock,
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
	holdUntil <-chan time.Time // set while pollAcks wait for a poll in flight
	avgRun    time.Duration    // moving average of handler durations; 0 until one returned
}

// run serves events until quit closes.
func (s *slots) run() {
	st := &slotState{active: map[*job]jobState{}}
	for {
		select {
		case <-st.holdUntil:
			st.holdUntil = nil
			acks := st.pollAcks
			st.pollAcks = nil
			s.ackAlone(acks)
		case ev := <-s.claimed:
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
			p := pollPlan{}
			p.free, p.prefetch = s.pollSize(st)
			p.want = p.free + p.prefetch
			st.pollerIdle = p.want <= 0
			p.acks, st.pollAcks = st.pollAcks, nil
			st.ackPollOut = !st.pollerIdle && len(p.acks) > 0
			st.stopHold()
			reply <- p
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
	free = max(s.concurrency-st.running-len(st.waiting), 0)
	if s.prefetch > 0 && st.avgRun > 0 && st.avgRun < s.prefetchBelow {
		// Waiting jobs beyond the slots they will fill are prefetched ones.
		prefetch = max(s.prefetch-max(len(st.waiting)+st.running-s.concurrency, 0), 0)
	}
	free = min(free, maxPollTasks)
	return free, min(prefetch, maxPollTasks-free)
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
}

func (s *slots) wakePoller() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// claim hands the keeper the jobs a poll claimed (each runs as soon as a slot is
// free) and whether the poll came back short of what it asked for.
func (s *slots) claim(jobs []*job, short bool) { s.claimed <- claimEvent{jobs: jobs, short: short} }

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
