package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// The reporter delivers each handler's outcome: acks through one sender goroutine
// that batches the ones finishing together, nacks, snoozes and releases from the
// goroutine that decided them. Each retries while the server is unreachable,
// until the lease has surely expired. Every report ends with slots.done.

// report delivers the outcome err of j's handler (cause: its context's cause).
func (r *runner) report(j *job, err, cause error) {
	log := r.jobLog(j)
	switch {
	case j.lost.Load():
		log.Warn("task not reported: its lease was lost, so another worker may run it", "handler_err", err)
	case err == nil:
		r.acks <- j // the sender marks j done once the ack is delivered
		return
	case isSnooze(err):
		d, _ := SnoozeDelay(err)
		r.snooze(j, log, d)
	default:
		n := NackRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken,
			Error: errorText(err), Permanent: IsPermanent(err)}
		if d, ok := RetryDelay(err); ok {
			n.RetryAfter = &d
		}
		if cancelledWhileExecuting(err, cause) {
			n.Error = "cancelled while executing"
		}
		r.send(j, log, "nack", func(ctx context.Context) error {
			_, err := r.c.Nack(ctx, n)
			return err
		})
	}
	r.slots.done(j)
}

func (r *runner) jobLog(j *job) *slog.Logger {
	return r.log.With("task_id", j.ID, "queue", j.Queue, "attempt", j.Attempt)
}

// ackAlone queues jobs' acks for the sender (they go without a poll).
func (r *runner) ackAlone(jobs []*job) {
	if len(jobs) == 0 {
		return
	}
	go func() {
		for _, j := range jobs {
			r.acks <- j
		}
	}()
}

// sendAcks is the ack sender: it sends each ack as soon as it arrives, together
// with every other one queued meanwhile (POST /workers/ack/batch), until Run ends.
func (r *runner) sendAcks() {
	for {
		var batch []*job
		select {
		case j := <-r.acks:
			batch = append(batch, j)
		case <-r.stopped:
			return
		}
	more:
		for len(batch) < maxPollTasks {
			select {
			case j := <-r.acks:
				batch = append(batch, j)
			default:
				break more
			}
		}
		r.ackBatch(batch)
	}
}

// ackBatch sends one batch of acks and marks each job done. An ack the batch
// could not deliver goes the single-ack way, with its retries.
func (r *runner) ackBatch(batch []*job) {
	if len(batch) == 1 {
		r.ackOne(batch[0])
		r.slots.done(batch[0])
		return
	}
	ctx, cancel := context.WithTimeout(r.bg, 10*time.Second)
	results, err := r.c.AckBatchMinimal(ctx, r.cfg.ID, ackItems(batch))
	cancel()
	for i, j := range batch {
		switch {
		case err != nil: // not delivered as a batch: one by one, with retries
			r.ackOne(j)
		case results[i].Err != nil:
			r.jobLog(j).Warn("ack refused: the lease was lost, so another worker may run the task", "err", results[i].Err)
		}
		r.slots.done(j)
	}
}

// ackOne acks j alone, retrying through outages.
func (r *runner) ackOne(j *job) {
	log := r.jobLog(j)
	var tooLarge error
	r.send(j, log, "ack", func(ctx context.Context) error {
		_, err := r.c.Ack(ctx, r.cfg.ID, j.ID, j.leaseToken, j.result)
		if errors.Is(err, ErrPayloadTooLarge) {
			tooLarge = err
			return nil
		}
		return err
	})
	if tooLarge != nil {
		// The same result would be refused on every attempt.
		r.send(j, log, "nack", func(ctx context.Context) error {
			_, err := r.c.Nack(ctx, NackRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken,
				Error: "result refused: " + tooLarge.Error(), Permanent: true})
			return err
		})
	}
}

// snooze releases j for d: back after d, without spending a retry. A server
// without the release endpoint gets a retryable nack with that delay instead,
// which does spend one.
func (r *runner) snooze(j *job, log *slog.Logger, d time.Duration) {
	reason := fmt.Sprintf("snoozed for %s by worker %s", d, r.cfg.ID)
	r.send(j, log, "snooze", func(ctx context.Context) error {
		_, err := r.c.Release(ctx, ReleaseRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken,
			Reason: reason, Delay: max(d, time.Millisecond)})
		if errors.Is(err, ErrNotFound) {
			_, err = r.c.Nack(ctx, NackRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken,
				Error: reason, RetryAfter: &d})
		}
		return err
	})
}

// handBack releases j, which shutdown took from its handler (or which never
// started), so that another worker takes it at once.
func (r *runner) handBack(j *job, unstarted bool) {
	zero := time.Duration(0)
	why := "before the handler finished"
	if unstarted {
		why = "before the prefetched task started"
	}
	reason := fmt.Sprintf("worker %s shut down %s; handed back for another worker", r.cfg.ID, why)
	r.send(j, r.jobLog(j), "release", func(ctx context.Context) error {
		_, err := r.c.Release(ctx, ReleaseRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken, Reason: reason})
		if errors.Is(err, ErrNotFound) { // a server older than /workers/release
			_, err = r.c.Nack(ctx, NackRequest{WorkerID: r.cfg.ID, TaskID: j.ID, LeaseToken: j.leaseToken,
				Error: reason, RetryAfter: &zero})
		}
		return err
	})
	r.slots.done(j)
}

// send makes a report, retrying with backoff while the server is unreachable or
// unavailable, until the lease has surely expired (the server then retries the
// task itself) or Run gives up at the end of its shutdown.
func (r *runner) send(j *job, log *slog.Logger, what string, call func(context.Context) error) {
	b := newBackoff(r.cfg.RetryMin, r.cfg.RetryMax)
	for {
		ctx, cancel := context.WithTimeout(r.bg, 10*time.Second)
		err := call(ctx)
		cancel()
		switch {
		case err == nil:
			return
		case errors.Is(err, ErrLeaseLost):
			log.Warn(what+" refused: the lease was lost, so another worker may run the task", "err", err)
			return
		case r.bg.Err() != nil:
			log.Error(what+" abandoned: the worker stopped; the server will retry the task when its lease expires", "err", err)
			return
		case !temporary(err) && !errors.Is(err, context.DeadlineExceeded):
			log.Error(what+" failed", "err", err)
			return
		case j.leaseExpired(r.clock.Now()):
			log.Error(what+" abandoned: the lease expired meanwhile; the server will retry the task", "err", err)
			return
		}
		d := b.next()
		log.Warn(what+" failed; retrying", "in", d, "err", err)
		sleep(r.bg, d)
	}
}
