// Command goscenario is the cross-language conformance scenario written with the
// Go SDK (package client). The contract it follows is sdk/conformance/README.md:
// run with TASKFORGE_URL and TASKFORGE_QUEUE set, it prints one JSON line of task
// ids on stdout and exits 0; anything else is a failure.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/taskforge/taskforge/client"
)

// waitLimit bounds every wait of the scenario.
const waitLimit = 60 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "goscenario:", err)
		os.Exit(1)
	}
}

type payload struct {
	Kind string `json:"kind"`
}

func run() error {
	url, queue := os.Getenv("TASKFORGE_URL"), os.Getenv("TASKFORGE_QUEUE")
	if url == "" || queue == "" {
		return errors.New("TASKFORGE_URL and TASKFORGE_QUEUE must be set")
	}
	c, err := client.New(url)
	if err != nil {
		return err
	}
	holding := make(chan struct{})
	var holdOnce, failOnce sync.Once
	w := client.NewWorker(c, client.WorkerConfig{
		ID: fmt.Sprintf("conformance-go-%d", os.Getpid()), Concurrency: 4, ShutdownGrace: time.Second,
		PollWait: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	w.Handle(queue, func(ctx context.Context, job *client.Job) error {
		var p payload
		if err := job.Decode(&p); err != nil {
			return err
		}
		switch p.Kind {
		case "ack":
			if err := job.Progress(ctx, map[string]int{"pct": 50}); err != nil {
				return err
			}
			select { // longer than the server's 2 s lease: heartbeats keep it
			case <-time.After(3 * time.Second):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			return job.SetResult(map[string]any{"kind": "ack", "ok": true})
		case "nack":
			if job.Attempt == 1 {
				return client.RetryAfter(errors.New("transient"), 200*time.Millisecond)
			}
			return job.SetResult(map[string]any{"kind": "nack", "ok": true})
		case "fail":
			first := false
			failOnce.Do(func() { first = true })
			if first {
				return client.Permanent(errors.New("permanent failure"))
			}
			return job.SetResult(map[string]any{"kind": "fail", "ok": true})
		case "grouped":
			return job.SetResult(map[string]any{"kind": "grouped", "ok": true})
		case "hold":
			holdOnce.Do(func() { close(holding) })
			<-ctx.Done() // until the runtime stops the handler
			return context.Cause(ctx)
		}
		return client.Permanent(fmt.Errorf("unknown kind %q", p.Kind))
	})

	// Stopping the worker the way Go users do: cancel Run's context.
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(runCtx) }()

	ids, flowErr := flow(c, queue, holding)
	stop()
	if err := <-runDone; err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if flowErr != nil {
		return flowErr
	}
	line, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

// ids are the scenario's task ids, printed as the contract's JSON line.
type ids struct {
	Ack     string `json:"ack"`
	Nack    string `json:"nack"`
	Fail    string `json:"fail"`
	Replay  string `json:"replay"`
	Hold    string `json:"hold"`
	Grouped string `json:"grouped"`
}

// flow is the producer's side of the scenario; it returns once the hold task's
// handler holds it.
func flow(c *client.Client, queue string, holding <-chan struct{}) (ids, error) {
	var out ids
	ctx, cancel := context.WithTimeout(context.Background(), 5*waitLimit)
	defer cancel()
	enqueue := func(kind string, retries *int) (string, error) {
		t, err := c.Enqueue(ctx, queue, client.NewTask{Payload: payload{Kind: kind}, MaxRetries: retries})
		if err != nil {
			return "", err
		}
		return t.ID, nil
	}
	wait := func(name, id, status string) error {
		wctx, wcancel := context.WithTimeout(ctx, waitLimit)
		defer wcancel()
		t, err := c.WaitTask(wctx, queue, id)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", name, err)
		}
		if t.Status != status {
			return fmt.Errorf("task %s (%s) is %s, want %s", name, id, t.Status, status)
		}
		return nil
	}
	if _, err := c.PutGroup(ctx, queue, "tenant-a", client.GroupSettings{Weight: client.Ptr(3), MaxConcurrency: client.Ptr(1)}); err != nil {
		return out, err
	}
	var err error
	if out.Ack, err = enqueue("ack", nil); err != nil {
		return out, err
	}
	if out.Nack, err = enqueue("nack", client.Ptr(3)); err != nil {
		return out, err
	}
	if out.Fail, err = enqueue("fail", client.Ptr(3)); err != nil {
		return out, err
	}
	grouped, err := c.Enqueue(ctx, queue, client.NewTask{Payload: payload{Kind: "grouped"}, Group: "tenant-a"})
	if err != nil {
		return out, err
	}
	out.Grouped = grouped.ID
	for _, s := range []struct{ name, id, status string }{
		{"ack", out.Ack, client.StatusDone}, {"nack", out.Nack, client.StatusDone}, {"fail", out.Fail, client.StatusDead},
		{"grouped", out.Grouped, client.StatusDone},
	} {
		if err := wait(s.name, s.id, s.status); err != nil {
			return out, err
		}
	}
	replay, err := c.ReplayDead(ctx, queue, out.Fail)
	if err != nil {
		return out, err
	}
	out.Replay = replay.ID
	if err := wait("replay", out.Replay, client.StatusDone); err != nil {
		return out, err
	}
	if out.Hold, err = enqueue("hold", nil); err != nil {
		return out, err
	}
	select {
	case <-holding:
	case <-time.After(waitLimit):
		return out, errors.New("the hold task never reached its handler")
	}
	return out, nil
}
