package client

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync/atomic"
	"time"
)

// maxHeartbeatBatch is the server's limit on the leases of one batch heartbeat.
const maxHeartbeatBatch = 1000

// defaultHeartbeatInterval is the interval until a poll advertises the server's.
const defaultHeartbeatInterval = 10 * time.Second

// heartbeater extends every lease the worker holds, once per interval, with one
// request (POST /workers/heartbeat/batch) for all of them; it cancels a handler
// whose task was cancelled, or whose lease is lost or has surely expired while
// heartbeats failed. Against a server without the batch endpoint it heartbeats
// each task on its own.
type heartbeater struct {
	r        *runner
	interval atomic.Int64  // nanoseconds: the shortest interval a poll advertised
	shorter  chan struct{} // the interval got shorter: restart the wait
	single   bool          // the server lacks the batch endpoint; only run touches it
}

func newHeartbeater(r *runner) *heartbeater {
	h := &heartbeater{r: r, shorter: make(chan struct{}, 1)}
	h.interval.Store(int64(defaultHeartbeatInterval))
	return h
}

// learn takes in the heartbeat interval a poll advertised.
func (h *heartbeater) learn(d time.Duration) {
	if d <= 0 {
		return
	}
	for {
		cur := h.interval.Load()
		if int64(d) >= cur {
			return
		}
		if h.interval.CompareAndSwap(cur, int64(d)) {
			select {
			case h.shorter <- struct{}{}:
			default:
			}
			return
		}
	}
}

// run heartbeats until ctx ends, on a fixed schedule as a ticker keeps it: each
// tick is an interval after the previous one, whatever the request in between
// took, and ticks missed while a slow request was out are dropped. So each held
// job's first heartbeat comes at most one interval after its claim, and a cancel
// reaches its handler at most one interval (plus a request) after it is requested.
func (h *heartbeater) run(ctx context.Context) {
	clock := h.r.clock
	every := func() time.Duration { return time.Duration(h.interval.Load()) }
	next := clock.Now().Add(every())
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.shorter:
			if sooner := clock.Now().Add(every()); sooner.Before(next) {
				next = sooner
			}
			continue
		case <-clock.After(max(next.Sub(clock.Now()), 0)):
		}
		interval := every()
		for now := clock.Now(); !next.After(now); {
			next = next.Add(interval)
		}
		jobs := h.r.slots.beating()
		for len(jobs) > 0 {
			n := min(len(jobs), maxHeartbeatBatch)
			h.beat(ctx, jobs[:n], interval)
			jobs = jobs[n:]
		}
		h.r.event(EventHeartbeat, "", nil)
	}
}

// beat heartbeats jobs in one request.
func (h *heartbeater) beat(ctx context.Context, jobs []*job, interval time.Duration) {
	r := h.r
	if h.single {
		for _, j := range jobs {
			h.beatOne(ctx, j, interval)
		}
		return
	}
	jobs = slices.DeleteFunc(slices.Clone(jobs), func(j *job) bool { return j.lost.Load() })
	if len(jobs) == 0 {
		return
	}
	refs := make([]LeaseRef, len(jobs))
	for i, j := range jobs {
		refs[i] = LeaseRef{TaskID: j.ID, LeaseToken: j.leaseToken}
	}
	reqCtx, cancel := context.WithTimeout(ctx, interval)
	results, date, err := r.c.heartbeatBatch(reqCtx, r.cfg.ID, refs)
	cancel()
	recv := r.clock.Now()
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrMethodNotAllowed) {
		r.log.Info("the server has no batch heartbeats; heartbeating each task on its own")
		h.single = true
		h.beat(ctx, jobs, interval)
		return
	}
	for i, j := range jobs {
		if j.owned.Load() {
			continue // the handler returned meanwhile; a refusal may just mean it was acked
		}
		if err != nil {
			h.failed(j, err)
			continue
		}
		h.settle(j, results[i].Lease, results[i].Err, recv, date)
	}
}

// beatOne heartbeats j alone.
func (h *heartbeater) beatOne(ctx context.Context, j *job, interval time.Duration) {
	reqCtx, cancel := context.WithTimeout(ctx, interval)
	l, date, err := h.r.c.heartbeat(reqCtx, h.r.cfg.ID, j.ID, j.leaseToken)
	cancel()
	recv := h.r.clock.Now()
	switch {
	case j.owned.Load():
	case err != nil && !errors.Is(err, ErrLeaseLost):
		h.failed(j, err)
	default:
		var lease LeaseState
		if l != nil {
			lease = *l
		}
		h.settle(j, lease, err, recv, date)
	}
}

// settle takes in the server's answer for j's lease: extended (err nil), or
// refused (ErrLeaseLost).
func (h *heartbeater) settle(j *job, l LeaseState, err error, recv, date time.Time) {
	if err != nil {
		j.loseLease()
		h.r.jobLog(j).Warn("lease lost; handler cancelled", "err", err)
		return
	}
	j.extend(recv, l.ExpiresAt, date)
	if l.CancelRequested {
		j.cancel(ErrTaskCancelled)
	}
}

// failed handles a heartbeat of j that did not reach the server, or got no
// answer: retried at the next interval, unless the lease has surely expired.
func (h *heartbeater) failed(j *job, err error) {
	log := h.r.jobLog(j)
	if j.leaseExpired(h.r.clock.Now()) {
		j.loseLease()
		log.Warn("heartbeats failed until the lease expired; handler cancelled", "err", err)
		return
	}
	log.Warn("heartbeat failed; retrying at the next interval", "err", err)
}

// reportProgress sends a heartbeat of j carrying progress, and takes in the lease
// it confirms as the periodic heartbeat does.
func (r *runner) reportProgress(ctx context.Context, j *job, progress json.RawMessage) error {
	if j.lost.Load() {
		return ErrLeaseLost
	}
	l, date, err := r.c.heartbeatWith(ctx, r.cfg.ID, j.ID, j.leaseToken, progress)
	recv := r.clock.Now()
	switch {
	case err == nil:
		j.extend(recv, l.ExpiresAt, date)
		if l.CancelRequested {
			j.cancel(ErrTaskCancelled)
		}
	case errors.Is(err, ErrLeaseLost):
		j.loseLease()
	}
	return err
}
