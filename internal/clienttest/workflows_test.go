package clienttest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testserver"
)

// TestWorkflowMethods: a CI pipeline (build → test + lint → deploy) submitted with
// the SDK runs on a Worker whose jobs name their step, and whose deploy reads its
// dependencies' results with GetWorkflow.
func TestWorkflowMethods(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	if _, err := c.CreateQueue(ctx, "ci", client.QueueSettings{}); err != nil {
		t.Fatal(err)
	}
	pipeline := client.NewWorkflow{Name: "ci", IdempotencyKey: "commit-abc", Steps: []client.NewStep{
		{Step: "build", Queue: "ci", Payload: map[string]any{"commit": "abc"}},
		{Step: "test", Queue: "ci", Payload: 1, DependsOn: []string{"build"}},
		{Step: "lint", Queue: "ci", Payload: 2, DependsOn: []string{"build"}},
		{Step: "deploy", Queue: "ci", Payload: 3, DependsOn: []string{"test", "lint"}},
	}}
	wf, created, err := c.SubmitWorkflow(ctx, pipeline)
	if err != nil || !created || wf.Status != client.WorkflowRunning || *wf.Step("deploy").Status != client.StatusBlocked {
		t.Fatalf("submit: %+v %v %v", wf, created, err)
	}
	again, created, err := c.SubmitWorkflow(ctx, pipeline)
	if err != nil || created || again.ID != wf.ID {
		t.Fatalf("repeat: %v %v", created, err)
	}
	pipeline.Name = "other"
	if _, _, err := c.SubmitWorkflow(ctx, pipeline); !errors.Is(err, client.ErrIdempotencyConflict) {
		t.Fatalf("conflict: %v", err)
	}
	if _, _, err := c.SubmitWorkflow(ctx, client.NewWorkflow{Steps: []client.NewStep{{Step: "a", Queue: "ci", Payload: 1, DependsOn: []string{"a"}}}}); !errors.Is(err, client.ErrInvalidRequest) {
		t.Fatalf("self dependency: %v", err)
	}

	var mu sync.Mutex
	ran := map[string]string{}
	var deployRead string
	w := worker(c, "ci-worker", 2)
	w.Handle("ci", func(ctx context.Context, job *client.Job) error {
		mu.Lock()
		ran[job.Step] = job.WorkflowID
		mu.Unlock()
		if job.Step == "deploy" {
			cur, err := c.GetWorkflow(ctx, job.WorkflowID)
			if err != nil {
				return err
			}
			mu.Lock()
			deployRead = string(cur.Step("test").Result) + string(cur.Step("lint").Result)
			mu.Unlock()
		}
		return job.SetResult(map[string]string{"step": job.Step})
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	testserver.Eventually(t, 20*time.Second, "pipeline succeeded", func() bool {
		got, err := c.GetWorkflow(ctx, wf.ID)
		return err == nil && got.Status == client.WorkflowSucceeded
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(ran) != 4 || ran["deploy"] != wf.ID || deployRead != `{"step":"test"}{"step":"lint"}` {
		t.Errorf("ran %v; deploy read %s", ran, deployRead)
	}
	mu.Unlock()

	page, err := c.ListWorkflows(ctx, client.WorkflowFilter{Status: client.WorkflowSucceeded, Limit: 10})
	if err != nil || len(page.Workflows) != 1 || page.Workflows[0].ID != wf.ID {
		t.Fatalf("list: %+v %v", page, err)
	}
	if _, err := c.CancelWorkflow(ctx, wf.ID); !errors.Is(err, client.ErrWorkflowNotCancellable) {
		t.Fatalf("cancel a finished workflow: %v", err)
	}
	second, _, err := c.SubmitWorkflow(ctx, client.NewWorkflow{Steps: []client.NewStep{{Step: "a", Queue: "ci", Payload: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := c.CancelWorkflow(ctx, second.ID)
	if err != nil || cancelled.Status != client.WorkflowCancelled {
		t.Fatalf("cancel: %+v %v", cancelled, err)
	}
	if _, err := c.GetWorkflow(ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, client.ErrWorkflowNotFound) {
		t.Fatalf("unknown workflow: %v", err)
	}
}
