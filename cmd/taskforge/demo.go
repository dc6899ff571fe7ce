package main

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/taskforge/taskforge/client"
)

// demoQueues are the queues `taskforge dev` creates, with the built-in handler that
// runs each.
var demoQueues = []struct {
	name, handler string
	settings      client.QueueSettings
}{
	{"demo", "sleep", client.QueueSettings{MaxRetries: client.Ptr(3)}},
	{"demo-flaky", "fail", client.QueueSettings{MaxRetries: client.Ptr(2), BackoffBase: client.Ptr(500 * time.Millisecond)}},
	{"demo-echo", "echo", client.QueueSettings{RateLimit: client.Set(5.0)}},
}

// runDemo creates the demo queues, runs a demo worker on them and trickles demo
// tasks in (some slow, some failing until a retry succeeds, some failing for good,
// some delayed) until ctx ends.
func runDemo(ctx context.Context, base string, log *slog.Logger) {
	c, err := client.New(base)
	if err != nil {
		log.Error("demo client", "err", err)
		return
	}
	for _, q := range demoQueues {
		if _, err := c.CreateQueue(ctx, q.name, q.settings); err != nil && !errors.Is(err, client.ErrQueueExists) {
			log.Error("create demo queue", "queue", q.name, "err", err)
			return
		}
	}
	w := client.NewWorker(c, client.WorkerConfig{ID: "demo-worker", Concurrency: 4, Logger: log})
	for _, q := range demoQueues {
		w.Handle(q.name, builtinHandlers[q.handler])
	}
	go func() {
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("demo worker stopped", "err", err)
		}
	}()

	tick := time.NewTicker(700 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := c.Enqueue(ctx, demoQueues[0].name, demoTask(n)); err != nil && ctx.Err() == nil {
			log.Warn("demo enqueue", "err", err)
		}
		if n%3 == 0 {
			// fail_times 1 recovers on its retry; 5 exceeds the budget and dead-letters.
			failTimes := 1
			if n%9 == 0 {
				failTimes = 5
			}
			if _, err := c.Enqueue(ctx, demoQueues[1].name, client.NewTask{Payload: map[string]int{"fail_times": failTimes}}); err != nil && ctx.Err() == nil {
				log.Warn("demo enqueue", "err", err)
			}
		}
		if n%2 == 0 {
			_, _ = c.Enqueue(ctx, demoQueues[2].name, client.NewTask{Payload: map[string]any{"n": n, "note": "echoed back as the result"}})
		}
	}
}

// demoTask is a sleep task: mostly short, sometimes slow, every fifth delayed.
func demoTask(n int) client.NewTask {
	t := client.NewTask{Payload: map[string]int{"ms": 50 + rand.IntN(400)}, Priority: 1 + rand.IntN(10)}
	if n%5 == 0 {
		t.ScheduledAt = time.Now().Add(10 * time.Second)
	}
	return t
}
