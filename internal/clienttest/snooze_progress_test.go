package clienttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
)

// TestWorkerSnooze: a handler that returns Snooze(d) has its task released for d:
// it spends no retry (the queue allows one run, and the task is snoozed twice), and
// each attempt starts no sooner than d after the one before, on the database clock.
func TestWorkerSnooze(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{MaxRetries: client.Ptr(0)}))
	const d = 400 * time.Millisecond
	w := worker(c, "w-snooze", 1)
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		if job.Attempt <= 2 {
			return client.Snooze(d)
		}
		return nil
	})
	start(t, w)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1}))
	got := waitTask(t, c, "q", task.ID, 15*time.Second, "task done", status(client.StatusDone))
	h := got.AttemptHistory
	if len(h) != 3 || got.Releases != 2 || h[0].Status != client.AttemptReleased || h[1].Status != client.AttemptReleased ||
		h[2].Status != client.AttemptSucceeded {
		t.Fatalf("releases %d, attempts %+v", got.Releases, h)
	}
	if !strings.Contains(*h[0].Error, "snoozed for 400ms") {
		t.Errorf("attempt 1 reason %q", *h[0].Error)
	}
	for i := 1; i < len(h); i++ {
		gap := h[i].StartedAt.Sub(*h[i-1].FinishedAt)
		t.Logf("attempt %d started %s after attempt %d was snoozed", i+1, gap, i)
		if gap < d || gap > d+2*time.Second {
			t.Errorf("attempt %d started %s after the snooze of %s", i+1, gap, d)
		}
	}
}

func TestSnoozeValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want time.Duration }{
		{5 * time.Second, 5 * time.Second}, {-time.Second, 0}, {48 * time.Hour, client.MaxSnooze},
	} {
		err := client.Snooze(tc.in)
		if d, ok := client.SnoozeDelay(err); !ok || d != tc.want {
			t.Errorf("Snooze(%s): %s %v, want %s", tc.in, d, ok, tc.want)
		}
		if d, ok := client.SnoozeDelay(errors.Join(errors.New("wrapped"), err)); !ok || d != tc.want {
			t.Errorf("wrapped Snooze(%s): %s %v", tc.in, d, ok)
		}
		if client.IsPermanent(err) {
			t.Errorf("Snooze is not permanent")
		}
	}
	if _, ok := client.SnoozeDelay(errors.New("plain")); ok {
		t.Error("a plain error is no snooze")
	}
}

// TestJobProgress: Job.Progress shows on the task at once, while the handler still
// runs, stays after the ack, and is refused (ErrInvalidRequest) when too large,
// leaving the last report in place.
func TestJobProgress(t *testing.T) {
	t.Parallel()
	_, c := setup(t, shortLeases)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	proceed := make(chan struct{})
	tooLarge := make(chan error, 1)
	w := worker(c, "w-progress", 1)
	w.Handle("q", func(ctx context.Context, job *client.Job) error {
		if err := job.Progress(ctx, map[string]int{"done": 1, "of": 2}); err != nil {
			return err
		}
		tooLarge <- job.Progress(ctx, strings.Repeat("x", 5000))
		select { // several periodic heartbeats pass meanwhile
		case <-proceed:
		case <-ctx.Done():
			return ctx.Err()
		}
		return job.SetResult("ok")
	})
	start(t, w)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: 1}))
	if err := <-tooLarge; !errors.Is(err, client.ErrInvalidRequest) {
		t.Fatalf("oversized progress: %v, want ErrInvalidRequest", err)
	}
	got := waitTask(t, c, "q", task.ID, 10*time.Second, "progress shown", func(t *client.Task) bool { return t.Progress != nil && string(t.Progress) != "null" })
	if got.Status != client.StatusExecuting || string(got.Progress) != `{"of":2,"done":1}` {
		t.Fatalf("while running: %s, progress %s", got.Status, got.Progress)
	}
	// The periodic heartbeats keep the lease (600 ms) and leave the progress alone.
	first := *got.HeartbeatAt
	got = waitTask(t, c, "q", task.ID, 10*time.Second, "two periodic heartbeats", func(t *client.Task) bool {
		return t.HeartbeatAt != nil && t.HeartbeatAt.Sub(first) >= shortLease/2
	})
	if got.Status != client.StatusExecuting || got.Attempts != 1 || string(got.Progress) != `{"of":2,"done":1}` {
		t.Fatalf("after periodic heartbeats: %s, attempt %d, progress %s", got.Status, got.Attempts, got.Progress)
	}
	close(proceed)
	got = waitTask(t, c, "q", task.ID, 10*time.Second, "task done", status(client.StatusDone))
	if got.Attempts != 1 || string(got.Progress) != `{"of":2,"done":1}` {
		t.Fatalf("after the ack: %d attempts, progress %s", got.Attempts, got.Progress)
	}

	var j client.Job
	if err := j.Progress(ctx, 1); err == nil {
		t.Fatal("Progress of a Job no worker runs succeeded")
	}
	if err := (&client.Job{}).Progress(ctx, json.RawMessage("{")); err == nil {
		t.Fatal("Progress with invalid JSON succeeded")
	}
}
