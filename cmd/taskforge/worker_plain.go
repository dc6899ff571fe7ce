package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/taskforge/taskforge/client"
)

// Worker protocols of `taskforge worker --protocol`: the SDK's runtime, or the
// HTTP protocol used the way docs/api.md describes it, without the SDK's
// prefetch, acks on polls and batched heartbeats.
const (
	protocolSDK     = "sdk"     // client.Worker
	protocolPlain   = "plain"   // each of --concurrency loops: poll one task, run it, POST /workers/ack
	protocolBatched = "batched" // one loop: poll up to --concurrency tasks, run them at once, one POST /workers/ack/batch
)

// plainWorker runs handlers over the bare protocol, for benchmarks that measure
// what a worker written from the API reference gets. It does not heartbeat: it
// is for tasks far shorter than the lease.
type plainWorker struct {
	c           *client.Client
	id          string
	queues      []string
	handlers    map[string]client.HandlerFunc
	concurrency int
	pollWait    time.Duration
	batched     bool
	log         *slog.Logger
}

// run polls until ctx ends; tasks in hand then still run and are reported.
func (w *plainWorker) run(ctx context.Context) error {
	loops := w.concurrency
	if w.batched {
		loops = 1
	}
	errs := make(chan error, loops)
	var wg sync.WaitGroup
	for i := 0; i < loops; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- w.loop(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// loop is one poller: poll, run what came, report, again.
func (w *plainWorker) loop(ctx context.Context) error {
	max := 1
	if w.batched {
		max = w.concurrency
	}
	for ctx.Err() == nil {
		res, err := w.c.Poll(ctx, client.PollRequest{WorkerID: w.id, Queues: w.queues, MaxTasks: max, Wait: w.pollWait})
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, client.ErrInvalidRequest):
			return err
		case err != nil:
			w.log.Warn("poll failed; retrying in 100ms", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		jobs := make([]*client.Job, len(res.Tasks))
		outcomes := make([]error, len(res.Tasks))
		var wg sync.WaitGroup
		for i, t := range res.Tasks {
			jobs[i] = &client.Job{ID: t.ID, Queue: t.Queue, Payload: t.Payload, Priority: t.Priority, Attempt: t.Attempt, WorkerID: w.id}
			wg.Add(1)
			go func() {
				defer wg.Done()
				outcomes[i] = w.handlers[t.Queue](context.WithoutCancel(ctx), jobs[i])
			}()
		}
		wg.Wait()
		w.report(context.WithoutCancel(ctx), res.Tasks, jobs, outcomes)
	}
	return nil
}

// report acks the tasks whose handler returned nil (one batch, or one request
// each) and nacks the others.
func (w *plainWorker) report(ctx context.Context, tasks []client.PolledTask, jobs []*client.Job, outcomes []error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var acks []client.AckItem
	for i, t := range tasks {
		if err := outcomes[i]; err != nil {
			n := client.NackRequest{WorkerID: w.id, TaskID: t.ID, LeaseToken: t.LeaseToken, Error: err.Error(), Permanent: client.IsPermanent(err)}
			if _, nerr := w.c.Nack(ctx, n); nerr != nil {
				w.log.Warn("nack failed; the task is retried when its lease expires", "task_id", t.ID, "err", nerr)
			}
			continue
		}
		item := client.AckItem{TaskID: t.ID, LeaseToken: t.LeaseToken, Result: jobs[i].Result()}
		if !w.batched {
			if err := retryUnavailable(ctx, func() error {
				_, err := w.c.Ack(ctx, w.id, item.TaskID, item.LeaseToken, item.Result)
				return err
			}); err != nil {
				w.log.Warn("ack failed; the task is retried when its lease expires", "task_id", t.ID, "err", err)
			}
			continue
		}
		acks = append(acks, item)
	}
	if len(acks) == 0 {
		return
	}
	if err := retryUnavailable(ctx, func() error {
		_, err := w.c.AckBatchMinimal(ctx, w.id, acks)
		return err
	}); err != nil {
		w.log.Warn(fmt.Sprintf("ack of %d tasks failed; they are retried when their leases expire", len(acks)), "err", err)
	}
}

// retryUnavailable calls f until it succeeds or fails with anything but a 503 (the
// server asks to retry later, e.g. when too many requests wait for a commit), at
// most five times, 50 ms × the try number apart, as docs/operations.md advises.
func retryUnavailable(ctx context.Context, f func() error) error {
	for try := 1; ; try++ {
		err := f()
		if err == nil || try == 5 || !errors.Is(err, client.ErrUnavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try) * 50 * time.Millisecond):
		}
	}
}
