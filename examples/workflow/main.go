// Command workflow runs a CI pipeline as a TaskForge workflow on the server at
// $TASKFORGE_URL (default http://127.0.0.1:8080): build, then test and lint in
// parallel, then deploy once both passed. It submits the workflow (once, whatever
// the number of runs, thanks to its idempotency key), works its steps with one
// Worker, and exits when the workflow has finished.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/taskforge/taskforge/client"
)

func main() {
	c, err := client.New(cmp.Or(os.Getenv("TASKFORGE_URL"), client.DefaultURL))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.CreateQueue(ctx, "ci", client.QueueSettings{}); err != nil && !errors.Is(err, client.ErrQueueExists) {
		log.Fatal(err)
	}
	commit := cmp.Or(os.Getenv("COMMIT"), "4f2a9c1")
	wf, _, err := c.SubmitWorkflow(ctx, client.NewWorkflow{
		Name:           "ci " + commit,
		IdempotencyKey: "ci-" + commit,
		Steps: []client.NewStep{
			{Step: "build", Queue: "ci", Payload: map[string]string{"commit": commit}},
			{Step: "test", Queue: "ci", Payload: map[string]string{"suite": "unit"}, DependsOn: []string{"build"}},
			{Step: "lint", Queue: "ci", Payload: map[string]string{"linter": "staticcheck"}, DependsOn: []string{"build"}},
			{Step: "deploy", Queue: "ci", Payload: map[string]string{"env": "staging"}, DependsOn: []string{"test", "lint"}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("workflow %s submitted", wf.ID)

	w := client.NewWorker(c, client.WorkerConfig{Concurrency: 2, PollWait: time.Second})
	w.Handle("ci", func(ctx context.Context, job *client.Job) error {
		var result any
		switch job.Step {
		case "build":
			result = map[string]string{"artifact": "app-" + commit + ".tar.gz"}
		case "test", "lint":
			result = map[string]string{job.Step: "passed"}
		case "deploy":
			// A step reads what the steps it depends on returned.
			cur, err := c.GetWorkflow(ctx, job.WorkflowID)
			if err != nil {
				return err // a failed attempt: retried with backoff
			}
			log.Printf("deploy: build gave %s, test %s, lint %s", cur.Step("build").Result,
				cur.Step("test").Result, cur.Step("lint").Result)
		}
		log.Printf("step %s done", job.Step)
		return job.SetResult(result)
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	for {
		cur, err := c.GetWorkflow(ctx, wf.ID)
		if err != nil {
			log.Fatal(err)
		}
		if cur.Status != client.WorkflowRunning {
			stop()
			if err := <-done; err != nil {
				log.Fatal(err)
			}
			fmt.Printf("workflow %s %s\n", cur.ID, cur.Status)
			if cur.Status != client.WorkflowSucceeded {
				os.Exit(1)
			}
			return
		}
		select {
		case <-ctx.Done():
			log.Fatal("the workflow did not finish within a minute")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
