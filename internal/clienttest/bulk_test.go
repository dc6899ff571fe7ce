package clienttest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testserver"
)

func TestWaitTaskAndBulkOperations(t *testing.T) {
	t.Parallel()
	s, c := setup(t, nil)
	ctx := context.Background()
	s.CreateQueue("q", map[string]any{"max_retries": 0})

	// WaitTask returns once a worker acks, on the transition, not by polling.
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1}))
	type waited struct {
		task *client.Task
		err  error
	}
	waitDone := make(chan waited, 1)
	go func() {
		got, err := c.WaitTask(ctx, "q", task.ID)
		waitDone <- waited{got, err}
	}()
	// Ack once WaitTask waits on the replica, so that the ack's transition is what
	// ends the wait.
	testserver.Eventually(t, 10*time.Second, "WaitTask waiting", func() bool { return s.Server.Lifecycle.Waiting() == 1 })
	if p := s.Poll("w", []string{"q"}, 1, 5000); len(p) != 1 || s.Ack("w", p[0]).Status != 200 {
		t.Fatalf("poll and ack: %+v", p)
	}
	w := <-waitDone
	got := must[*client.Task](t)(w.task, w.err)
	if got.Status != client.StatusDone || len(got.AttemptHistory) != 1 {
		t.Fatalf("WaitTask: %s with %d attempts", got.Status, len(got.AttemptHistory))
	}

	// A context that ends first gives the task as last read, with the context's error.
	later := client.NewTask{Payload: 2, ScheduledAt: time.Now().Add(time.Hour)}
	waiting := must[*client.Task](t)(c.Enqueue(ctx, "q", later))
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	got, err := c.WaitTask(short, "q", waiting.ID)
	if !errors.Is(err, context.DeadlineExceeded) || got == nil || got.Status != client.StatusPending ||
		time.Since(start) > 2*time.Second {
		t.Fatalf("WaitTask past its deadline: %v, %+v after %s", err, got, time.Since(start))
	}
	if _, err := c.GetTaskWait(ctx, "q", waiting.ID, 31*time.Second); err == nil {
		t.Fatal("GetTaskWait took a wait over 30 s")
	}
	got = must[*client.Task](t)(c.GetTaskWait(ctx, "q", waiting.ID, 50*time.Millisecond))
	if got.Status != client.StatusPending {
		t.Fatalf("GetTaskWait: %s", got.Status)
	}

	// Bulk cancel, by ids and by status.
	more := must[[]client.Task](t)(c.EnqueueBatch(ctx, "q", []client.NewTask{later, later, later}))
	res := must[client.BulkCancel](t)(c.CancelTasks(ctx, "q", []string{more[0].ID}))
	if res.Cancelled != 1 || res.CancelRequested != 0 {
		t.Fatalf("CancelTasks: %+v", res)
	}
	res = must[client.BulkCancel](t)(c.CancelByStatus(ctx, "q", client.StatusPending))
	if res.Cancelled != 3 { // waiting, more[1], more[2]
		t.Fatalf("CancelByStatus: %+v", res)
	}
	if _, err := c.CancelByStatus(ctx, "q", client.StatusDone); !errors.Is(err, client.ErrInvalidRequest) {
		t.Fatalf("CancelByStatus(done): %v", err)
	}

	// Bulk discard.
	var dead []string
	for i := range 3 {
		d := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: i}))
		p := s.Poll("w", []string{"q"}, 1, 5000)
		if len(p) != 1 {
			t.Fatal("nothing to poll")
		}
		s.Nack("w", p[0], "boom", map[string]any{"retryable": false})
		dead = append(dead, d.ID)
	}
	if n := must[int](t)(c.DiscardDeadTasks(ctx, "q", dead[:1])); n != 1 {
		t.Fatalf("DiscardDeadTasks: %d", n)
	}
	if n := must[int](t)(c.DiscardAllDead(ctx, "q")); n != 2 {
		t.Fatalf("DiscardAllDead: %d", n)
	}
}
