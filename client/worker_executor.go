package client

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// job is one task held by the worker.
type job struct {
	*Job
	leaseToken  string
	ctx         context.Context // the handler's
	cancel      context.CancelCauseFunc
	stopTimeout context.CancelFunc
	interval    time.Duration // the heartbeat interval the server advertised
	owned       atomic.Bool   // set by whoever reports the task: its handler's return, or shutdown
	lost        atomic.Bool   // the lease is known to be lost

	mu       sync.Mutex
	leaseLen time.Duration // estimated lease length; zero when unknown
	deadline time.Time     // local estimate of the lease's expiry; zero when unknown
}

// claim makes the caller the one who reports the task; false if someone already is.
func (j *job) claim() bool { return j.owned.CompareAndSwap(false, true) }

// extend records a lease confirmed by a response received at recv, from the
// server's expiry and the response's Date header.
func (j *job) extend(recv, expires, date time.Time) {
	if date.IsZero() || expires.IsZero() {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	// Date is truncated to the second and recv follows the server's answer, so
	// the estimate errs late (by under a second plus the network delay): the
	// worker never gives up on a lease the server still honours.
	if l := expires.Sub(date); l > 0 {
		j.leaseLen = l
		j.deadline = recv.Add(l)
	}
}

// leaseExpired reports whether the lease has surely expired by now (the estimate
// already errs late; leaseMargin adds to that).
func (j *job) leaseExpired(now time.Time) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return !j.deadline.IsZero() && now.After(j.deadline.Add(leaseMargin))
}

// loseLease marks the lease lost and cancels the handler with ErrLeaseLost.
func (j *job) loseLease() {
	j.lost.Store(true)
	j.cancel(ErrLeaseLost)
}

// execute is an executor: it runs j's handler and has its outcome reported,
// unless shutdown took the task. A task cancelled, or whose lease was lost, while
// it waited is reported without running its handler.
func (r *runner) execute(j *job) {
	defer j.stopTimeout()
	ctx := j.ctx
	h := r.handlers[j.Queue]
	began, started := r.clock.Now(), ctx.Err() == nil
	if started {
		r.event(EventStarted, j.ID, nil)
	}
	var err error
	switch {
	case !started:
		err = fmt.Errorf("not started: %w", context.Cause(ctx))
	case h == nil:
		err = Permanent(fmt.Errorf("worker %s has no handler for queue %q", r.cfg.ID, j.Queue))
	case r.cfg.TracerProvider != nil:
		err = r.invokeTraced(ctx, h, j)
	default:
		err = invoke(ctx, h, j.Job)
	}
	r.event(EventFinished, j.ID, nil)
	if !j.claim() {
		return // shutdown handed the task back already
	}
	ackByPoll := err == nil && !j.lost.Load() && len(j.result) <= maxPollAckResult
	var ran time.Duration // 0: the handler did not run
	if started {
		ran = max(r.clock.Now().Sub(began), time.Nanosecond)
	}
	handed := r.slots.handlerDone(j, ran, ackByPoll)
	cause := context.Cause(ctx)
	j.cancel(context.Canceled)
	if handed {
		return // the next poll carries the ack
	}
	r.report(j, err, cause)
}

// invokeTraced is invoke inside a "taskforge.handle" span.
func (r *runner) invokeTraced(ctx context.Context, h HandlerFunc, j *job) error {
	spanCtx, span := r.cfg.TracerProvider.Tracer("github.com/taskforge/taskforge/client").Start(ctx, "taskforge.handle",
		trace.WithAttributes(attribute.String("taskforge.task_id", j.ID), attribute.String("taskforge.queue", j.Queue),
			attribute.Int("taskforge.attempt", j.Attempt)))
	defer span.End()
	err := invoke(spanCtx, h, j.Job)
	if err != nil && !isSnooze(err) {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	}
	return err
}

// invoke calls h, turning a panic into an error that carries the stack.
func invoke(ctx context.Context, h HandlerFunc, j *Job) (err error) {
	defer func() {
		if rec := recover(); rec != nil {
			err = &panicError{value: rec, stack: debug.Stack()}
		}
	}()
	return h(ctx, j)
}

// isSnooze reports whether a handler's err asks for a snooze.
func isSnooze(err error) bool {
	_, ok := SnoozeDelay(err)
	return ok
}

// errorText is err's message, cut to fit the server's limit.
func errorText(err error) string {
	s := err.Error()
	if len(s) > maxErrorText {
		s = s[:maxErrorText] + "\n… (truncated)"
	}
	if s == "" {
		s = fmt.Sprintf("%T with an empty message", err)
	}
	return s
}

// cancelledWhileExecuting reports whether a handler's err is its context's
// cancellation after the task was cancelled.
func cancelledWhileExecuting(err, cause error) bool {
	return errors.Is(cause, ErrTaskCancelled) && errors.Is(err, context.Canceled)
}
