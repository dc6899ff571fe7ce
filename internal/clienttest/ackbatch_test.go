package clienttest_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testserver"
)

// requests reads taskforge_http_requests_total for a route with status 200.
func requests(t *testing.T, s *testserver.Instance, route string) int {
	t.Helper()
	body := s.Must(200, "GET", "/metrics", nil).Body
	re := regexp.MustCompile(`taskforge_http_requests_total\{code="200",method="POST",route="` + regexp.QuoteMeta(route) + `"\} (\d+)`)
	m := re.FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func TestWorkerBatchesAcksOfTasksFinishingTogether(t *testing.T) {
	t.Parallel()
	s, c := setup(t, nil)
	ctx := context.Background()
	if _, err := c.CreateQueue(ctx, "q", client.QueueSettings{}); err != nil {
		t.Fatal(err)
	}
	tasks := make([]client.NewTask, 300)
	for i := range tasks {
		tasks[i] = client.NewTask{Payload: i}
	}
	if _, err := c.EnqueueBatch(ctx, "q", tasks); err != nil {
		t.Fatal(err)
	}
	w := worker(c, "batcher", 32)
	w.Handle("q", func(context.Context, *client.Job) error { return nil })
	start(t, w)
	testserver.Eventually(t, 60*time.Second, "all done", func() bool {
		st, err := c.Stats(ctx, "q")
		return err == nil && st.Depth["done"] == 300
	})
	single, batched, polls := requests(t, s, "/workers/ack"), requests(t, s, "/workers/ack/batch"), requests(t, s, "/workers/poll")
	t.Logf("300 acks took %d single and %d batch requests, beside %d polls", single, batched, polls)
	// Each ack rides on a poll or goes in a batch: far fewer requests than tasks.
	if single+batched+polls >= 300 {
		t.Fatalf("300 tasks took %d single acks, %d ack batches and %d polls: no batching", single, batched, polls)
	}
}

// TestWorkerAcksRideOnTheNextPoll: with work waiting, a handler that returns while
// the poll is out leaves its ack to the next poll, which commits it with its claim:
// most acks go with polls, and the last tasks end long before a poll waiting for
// more work (up to 30 s) returns.
func TestWorkerAcksRideOnTheNextPoll(t *testing.T) {
	t.Parallel()
	s, c := setup(t, nil)
	ctx := context.Background()
	if _, err := c.CreateQueue(ctx, "q", client.QueueSettings{}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	tasks := make([]client.NewTask, n)
	for i := range tasks {
		tasks[i] = client.NewTask{Payload: i}
	}
	if _, err := c.EnqueueBatch(ctx, "q", tasks); err != nil {
		t.Fatal(err)
	}
	cfg := workerConfig("next-poll", 4)
	cfg.PollWait = 30 * time.Second
	w := client.NewWorker(c, cfg)
	w.Handle("q", func(context.Context, *client.Job) error { return nil })
	start(t, w)
	// 20 s: well under the 30 s a held ack would wait for the last poll.
	testserver.Eventually(t, 20*time.Second, "all done", func() bool {
		st, err := c.Stats(ctx, "q")
		return err == nil && st.Depth["done"] == n
	})
	polls, alone := requests(t, s, "/workers/poll"), requests(t, s, "/workers/ack")+requests(t, s, "/workers/ack/batch")
	t.Logf("%d tasks took %d polls and %d ack requests", n, polls, alone)
	if alone > n/4 {
		t.Fatalf("%d tasks took %d ack requests beside %d polls: want most acks on polls", n, alone, polls)
	}
}

// TestWorkerAcksRideOnPolls: a worker whose handler returns while it has nothing
// else to ask for (its prefetched task already at hand) sends the ack with the
// poll the freed slot sets off, so a one-slot worker makes about one request per
// task, not two. (A handler quicker than a poll's round trip returns while the
// poll is out; its ack goes alone.)
func TestWorkerAcksRideOnPolls(t *testing.T) {
	t.Parallel()
	s, c := setup(t, nil)
	ctx := context.Background()
	if _, err := c.CreateQueue(ctx, "q", client.QueueSettings{}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	tasks := make([]client.NewTask, n)
	for i := range tasks {
		tasks[i] = client.NewTask{Payload: i}
	}
	if _, err := c.EnqueueBatch(ctx, "q", tasks); err != nil {
		t.Fatal(err)
	}
	var handled, parked atomic.Int32
	cfg := workerConfig("rider", 1)
	cfg.OnPark = func() { parked.Add(1) }
	w := client.NewWorker(c, cfg)
	w.Handle("q", func(_ context.Context, job *client.Job) error {
		// Return once the worker holds its next task and its poller has parked
		// (every slot and the prefetch room taken), as it is when handlers outlast
		// a poll's round trip; the first handler runs before any prefetching, the
		// last has no next task.
		since := parked.Load()
		if handled.Add(1) > 1 {
			testserver.Eventually(t, 10*time.Second, "next task prefetched and the poller parked", func() bool {
				if parked.Load() > since {
					return true
				}
				st, err := c.Stats(ctx, "q")
				return err == nil && st.Depth[client.StatusPending]+st.Depth[client.StatusClaimed] == 0
			})
		}
		return job.SetResult(job.Payload)
	})
	start(t, w)
	testserver.Eventually(t, 60*time.Second, "all done", func() bool {
		st, err := c.Stats(ctx, "q")
		return err == nil && st.Depth["done"] == n
	})
	polls, alone := requests(t, s, "/workers/poll"), requests(t, s, "/workers/ack")+requests(t, s, "/workers/ack/batch")
	t.Logf("%d tasks took %d polls and %d ack requests", n, polls, alone)
	// The last task's ack goes alone (the poll then out waits for work that never
	// comes); allow a few more for a loaded machine.
	if alone > 5 || polls+alone > n+7 {
		t.Fatalf("%d tasks took %d polls and %d ack requests, want acks riding on polls", n, polls, alone)
	}
	page, err := c.ListTasks(ctx, "q", client.TaskFilter{Status: client.StatusDone, Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range page.Tasks {
		if string(task.Result) != string(task.Payload) || task.Attempts != 1 {
			t.Fatalf("task %s: result %s for payload %s after %d attempts", task.ID, task.Result, task.Payload, task.Attempts)
		}
	}
}

// TestMinimalBatchCalls: EnqueueBatchMinimal returns the new tasks' ids in input
// order, and AckBatchMinimal acks as AckBatch does without the done tasks.
func TestMinimalBatchCalls(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	if _, err := c.CreateQueue(ctx, "q", client.QueueSettings{}); err != nil {
		t.Fatal(err)
	}
	ids, err := c.EnqueueBatchMinimal(ctx, "q", []client.NewTask{{Payload: "a"}, {Payload: "b", Priority: 1}})
	if err != nil || len(ids) != 2 {
		t.Fatalf("EnqueueBatchMinimal: %v %v", ids, err)
	}
	for i, want := range []string{`"a"`, `"b"`} {
		got, err := c.GetTask(ctx, "q", ids[i])
		if err != nil || string(got.Payload) != want {
			t.Fatalf("task %d (%s): %v %v", i, ids[i], got, err)
		}
	}
	res, err := c.Poll(ctx, client.PollRequest{WorkerID: "w", Queues: []string{"q"}, MaxTasks: 2, Wait: 2 * time.Second})
	if err != nil || len(res.Tasks) != 2 {
		t.Fatalf("poll: %v %v", res, err)
	}
	items := []client.AckItem{{TaskID: res.Tasks[0].ID, LeaseToken: res.Tasks[0].LeaseToken},
		{TaskID: res.Tasks[1].ID, LeaseToken: res.Tasks[0].LeaseToken}}
	results, err := c.AckBatchMinimal(ctx, "w", items)
	if err != nil || len(results) != 2 {
		t.Fatalf("AckBatchMinimal: %v %v", results, err)
	}
	if results[0].Err != nil || results[0].Task != nil || !errors.Is(results[1].Err, client.ErrLeaseLost) {
		t.Fatalf("AckBatchMinimal results: %+v", results)
	}
	if got, err := c.GetTask(ctx, "q", res.Tasks[0].ID); err != nil || got.Status != client.StatusDone {
		t.Fatalf("acked task: %v %v", got, err)
	}
}

// pollCounter counts the polls a client has sent (not answered).
type pollCounter struct {
	next http.RoundTripper
	sent atomic.Int32
}

func (p *pollCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/workers/poll" {
		p.sent.Add(1)
	}
	return p.next.RoundTrip(r)
}

// TestWorkerHeldAckDoesNotWaitForALongPoll: an ack held for the poll in flight
// goes once the hold has run out, when that poll is waiting for work: alone, or
// on a second poll, which carrying acks does not wait for work. The first poll
// brings both tasks it asked for (the queue still had work); the first task
// fails, and its freed slot sends a poll without acks that waits 30 s; the
// second task returns while that poll is out, so its ack is held.
func TestWorkerHeldAckDoesNotWaitForALongPoll(t *testing.T) {
	t.Parallel()
	s, c, polls := heldAckServer(t)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, "q", client.NewTask{Payload: "fail"}); err != nil {
		t.Fatal(err)
	}
	task, err := c.Enqueue(ctx, "q", client.NewTask{Payload: "second"})
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	cfg := workerConfig("held", 2)
	cfg.PollWait, cfg.Clock = 30*time.Second, clock
	w := client.NewWorker(c, cfg)
	w.Handle("q", func(_ context.Context, j *client.Job) error {
		if string(j.Payload) == `"fail"` {
			return client.Permanent(errors.New("fails at once"))
		}
		testserver.Eventually(t, 10*time.Second, "a second poll out", func() bool { return polls.sent.Load() >= 2 })
		return nil
	})
	start(t, w)
	// The keeper holds the ack for 50 ms (the SDK's pollAckHold) on the worker's clock.
	clock.waits.WaitUntil(t, "the held ack's wait", func() bool { return clock.waitingFor(50*time.Millisecond) > 0 })
	if n := requests(t, s, "/workers/ack") + requests(t, s, "/workers/ack/batch"); n != 0 {
		t.Fatalf("%d ack requests before the hold ran out, want the ack held", n)
	}
	clock.Advance(time.Second)
	// 20 s: well under the 30 s the held ack would wait for that poll.
	waitTask(t, c, "q", task.ID, 20*time.Second, "the task done", func(tk *client.Task) bool { return tk.Status == client.StatusDone })
	// One request took the ack: an ack request, or a third poll.
	sent := func() int {
		return requests(t, s, "/workers/ack") + requests(t, s, "/workers/ack/batch") + int(polls.sent.Load()) - 2
	}
	testserver.Eventually(t, 10*time.Second, "the held ack's request counted", func() bool { return sent() >= 1 })
	if n := sent(); n != 1 {
		t.Fatalf("%d ack requests and further polls, want the held ack sent once", n)
	}
}

// TestWorkerAckAfterAShortPollGoesAtOnce: once a poll has brought fewer tasks than
// it asked for, the queue has run dry and the poll in flight waits for work: an
// ack goes alone at once, not after the hold. The worker's clock never moves, so a
// held ack would wait for the 30 s poll.
func TestWorkerAckAfterAShortPollGoesAtOnce(t *testing.T) {
	t.Parallel()
	s, c, polls := heldAckServer(t)
	task, err := c.Enqueue(context.Background(), "q", client.NewTask{Payload: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := workerConfig("short", 2) // the first poll asks for 2 and brings 1
	cfg.PollWait, cfg.Clock = 30*time.Second, newFakeClock()
	w := client.NewWorker(c, cfg)
	w.Handle("q", func(context.Context, *client.Job) error {
		testserver.Eventually(t, 10*time.Second, "a second poll out", func() bool { return polls.sent.Load() >= 2 })
		return nil
	})
	start(t, w)
	waitTask(t, c, "q", task.ID, 20*time.Second, "the task done", func(tk *client.Task) bool { return tk.Status == client.StatusDone })
	ackRequestsSettle(t, s, "the ack sent alone once")
}

// ackRequestsSettle waits for the one ack request sent alone to be counted (the
// server counts a request after its answer, which may come after the task is seen
// done) and fails if more were sent.
func ackRequestsSettle(t *testing.T, s *testserver.Instance, what string) {
	t.Helper()
	alone := func() int { return requests(t, s, "/workers/ack") + requests(t, s, "/workers/ack/batch") }
	testserver.Eventually(t, 10*time.Second, what, func() bool { return alone() >= 1 })
	if n := alone(); n != 1 {
		t.Fatalf("%d ack requests, want %s", n, what)
	}
}

// heldAckServer starts a server with queue q, and a client whose polls are counted.
func heldAckServer(t *testing.T) (*testserver.Instance, *client.Client, *pollCounter) {
	t.Helper()
	s := testserver.Start(t, testserver.Options{})
	polls := &pollCounter{next: http.DefaultTransport}
	c, err := client.New(s.URL, client.WithHTTPClient(&http.Client{Transport: polls}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(context.Background(), "q", client.QueueSettings{}); err != nil {
		t.Fatal(err)
	}
	return s, c, polls
}
