package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/propagation"
)

// poll is the poller: it long-polls for as many tasks as the slot keeper has
// room for, carrying the acks the keeper left to it, and hands what it claims to
// the keeper, until ctx ends or the server refuses the poll itself. It keeps up
// to maxPollsInFlight polls out at once, as the keeper plans them; when it
// stops, it waits for the polls out to be answered (or to fail).
func (r *runner) poll(ctx context.Context) error {
	b := newBackoff(r.cfg.RetryMin, r.cfg.RetryMax)
	answers := make(chan polled, maxPollsInFlight)
	out := 0
	var fatal error
	for {
		if ctx.Err() != nil || fatal != nil {
			if out == 0 {
				return fatal
			}
			r.settle(ctx, <-answers, b)
			out--
			continue
		}
		p := r.slots.plan()
		if p.want > 0 {
			out++
			go r.sendPoll(ctx, p, answers)
			continue
		}
		r.ackAlone(p.acks)
		if out == 0 && r.onPark != nil {
			r.onPark()
		}
		select {
		case <-r.slots.freed:
		case a := <-answers:
			out--
			fatal = r.settle(ctx, a, b)
		case <-ctx.Done():
		}
	}
}

// polled is a poll's answer, or its failure.
type polled struct {
	want int // the room the keeper planned the poll for
	req  PollRequest
	acks []*job // the jobs whose acks the poll carried
	sent time.Time
	recv time.Time // on the worker's clock
	res  *PollResult
	date time.Time
	err  error
}

// sendPoll sends the poll that asks for p and hands its answer to answers. Run's
// end (ctx) abandons a poll waiting for work, not one carrying acks: the server
// answers those at once, and an answer not read would leave the acks' fate
// unknown (sent again, they may be refused as lost leases, and the tasks run
// again). Such a poll ends only when Run gives up on its reports (r.bg), bounded
// as a report is.
func (r *runner) sendPoll(ctx context.Context, p pollPlan, answers chan<- polled) {
	a := polled{want: p.want, req: r.pollRequest(p), acks: p.acks, sent: time.Now()}
	if len(p.acks) > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(r.bg, r.cfg.PollWait+10*time.Second)
		defer cancel()
	}
	a.res, a.date, a.err = r.c.poll(ctx, a.req)
	a.recv = r.clock.Now()
	answers <- a
}

// settle takes in a poll's answer: the acks it carried are settled, what it
// claimed goes to the keeper. A failure the worker cannot retry is returned;
// one it can is waited out (backoff b), as is a rate limit's hold.
func (r *runner) settle(ctx context.Context, a polled, b *backoff) error {
	req, res, err := a.req, a.res, a.err
	r.settlePollAcks(a.acks, res, err)
	if err != nil {
		r.slots.pollFailed(a.want)
	}
	if err != nil && req.PrefetchTasks > 0 && errors.Is(err, ErrInvalidRequest) {
		// A server older than prefetch_tasks refuses the field (and acked
		// nothing): ask for free slots and prefetch room in separate polls.
		if !r.oldServer {
			r.oldServer = true
			r.log.Warn("the server refused a poll with prefetch_tasks; polling as for an older server", "err", err)
		}
		r.event(EventPolled, "", err)
		return nil
	}
	if err == nil {
		jobs := make([]*job, len(res.Tasks))
		for i, t := range res.Tasks {
			jobs[i] = r.newJob(t, a.recv, a.date)
		}
		r.held.Add(len(jobs))
		r.slots.claim(jobs, a.want, len(jobs) < req.MaxTasks)
		if len(jobs) > 0 {
			r.beats.learn(jobs[0].interval)
		}
	}
	r.event(EventPolled, "", err)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrMethodNotAllowed) {
			return fmt.Errorf("taskforge worker %s: %w", r.cfg.ID, err)
		}
		d := b.next()
		r.log.Warn("poll failed; retrying", "in", d, "err", err)
		sleep(ctx, d)
		return nil
	}
	b.reset()
	if len(res.Tasks) == 0 && res.RetryAfter > 0 && time.Since(a.sent) < r.cfg.PollWait/2 {
		// A rate limit holds the work back and the server answered early: wait
		// for the next token rather than ask again at once.
		sleep(ctx, min(res.RetryAfter, r.cfg.PollWait))
	}
	return nil
}

// pollRequest is the poll that asks for p: free slots and prefetch room together,
// or, against a server older than prefetch_tasks, the free slots alone while there
// are any and the prefetch room ("prefetch": true) when there are not.
func (r *runner) pollRequest(p pollPlan) PollRequest {
	req := PollRequest{WorkerID: r.cfg.ID, Queues: r.queues, MaxTasks: p.want, Wait: r.cfg.PollWait,
		PrefetchTasks: p.prefetch, Acks: ackItems(p.acks)}
	switch {
	case !r.oldServer:
	case p.free > 0:
		req.MaxTasks, req.PrefetchTasks = p.free, 0
	default:
		req.Prefetch, req.PrefetchTasks = true, 0
	}
	return req
}

// newJob is a claimed task, its lease estimated from the poll's answer received
// at recv with the Date header date.
func (r *runner) newJob(t PolledTask, recv, date time.Time) *job {
	j := &job{Job: &Job{ID: t.ID, Queue: t.Queue, Payload: t.Payload, Priority: t.Priority,
		Attempt: t.Attempt, WorkerID: r.cfg.ID}, leaseToken: t.LeaseToken}
	if t.WorkflowID != nil && t.Step != nil {
		j.WorkflowID, j.Step = *t.WorkflowID, *t.Step
	}
	j.extend(recv, t.LeaseExpiresAt, date)
	j.report = func(ctx context.Context, progress json.RawMessage) error { return r.reportProgress(ctx, j, progress) }
	base := r.handlerBase
	if t.Traceparent != nil {
		j.Traceparent = *t.Traceparent
		base = propagation.TraceContext{}.Extract(base, propagation.MapCarrier{"traceparent": *t.Traceparent})
	}
	ctx, cancel := context.WithCancelCause(base)
	j.cancel = cancel
	j.stopTimeout = func() {}
	if t.TimeoutSeconds != nil && *t.TimeoutSeconds > 0 {
		// The server's deadline runs from the claim, so a prefetched task's does too.
		j.Timeout = time.Duration(*t.TimeoutSeconds) * time.Second
		ctx, j.stopTimeout = context.WithDeadlineCause(ctx, time.Now().Add(j.Timeout),
			fmt.Errorf("task timeout of %s exceeded: %w", j.Timeout, context.DeadlineExceeded))
	}
	j.ctx = ctx
	j.interval = time.Duration(t.HeartbeatIntervalMs) * time.Millisecond
	if j.interval <= 0 {
		j.interval = cmp.Or(j.leaseLen/3, 10*time.Second)
	}
	return j
}

// settlePollAcks marks the jobs whose acks a poll carried done, or when the poll
// failed (and so their fate is unknown), acks them the standalone way, with retries.
func (r *runner) settlePollAcks(jobs []*job, res *PollResult, err error) {
	if len(jobs) == 0 {
		return
	}
	if err != nil {
		r.ackAlone(jobs)
		return
	}
	for i, j := range jobs {
		if e := res.Acks[i].Err; e != nil {
			r.log.Warn("ack refused: the lease was lost, so another worker may run the task",
				"task_id", j.ID, "queue", j.Queue, "attempt", j.Attempt, "err", e)
		}
		r.slots.done(j)
	}
}

// ackItems are the acks of jobs.
func ackItems(jobs []*job) []AckItem {
	if len(jobs) == 0 {
		return nil
	}
	items := make([]AckItem, len(jobs))
	for i, j := range jobs {
		items[i] = AckItem{TaskID: j.ID, LeaseToken: j.leaseToken, Result: j.result}
	}
	return items
}
