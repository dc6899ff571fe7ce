package clienttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/internal/testserver"
)

// pollLog records the polls a client sends and how many tasks each brought. With
// refuse set, it answers a poll carrying prefetch_tasks itself, 400, as a server
// older than the field does (unknown JSON fields are refused).
type pollLog struct {
	next   http.RoundTripper
	refuse bool
	mu     sync.Mutex
	polls  []loggedPoll
}

type loggedPoll struct {
	req     wire.PollRequest
	tasks   int
	refused bool
}

func (p *pollLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path != "/workers/poll" || r.Body == nil {
		return p.next.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var lp loggedPoll
	if err := json.Unmarshal(body, &lp.req); err != nil {
		return nil, err
	}
	if p.refuse && lp.req.PrefetchTasks != nil {
		lp.refused = true
		p.add(lp)
		msg := `{"error":{"code":"invalid_request","message":"json: unknown field \"prefetch_tasks\""}}`
		return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/json; charset=utf-8"}}, Body: io.NopCloser(strings.NewReader(msg)),
			ContentLength: int64(len(msg)), Request: r}, nil
	}
	resp, err := p.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	var out wire.PollResponse
	if resp.StatusCode == http.StatusOK && json.Unmarshal(answer, &out) == nil {
		lp.tasks = len(out.Tasks)
	}
	p.add(lp)
	return resp, nil
}

func (p *pollLog) add(lp loggedPoll) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.polls = append(p.polls, lp)
}

func (p *pollLog) all() []loggedPoll {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.polls)
}

// pollLogServer is a test server, a client whose polls log records, and its queue q.
func pollLogServer(t *testing.T, refuse bool, settings client.QueueSettings) (*client.Client, *pollLog) {
	t.Helper()
	s := testserver.Start(t, testserver.Options{})
	log := &pollLog{next: http.DefaultTransport, refuse: refuse}
	c, err := client.New(s.URL, client.WithHTTPClient(&http.Client{Transport: log}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateQueue(context.Background(), "q", settings); err != nil {
		t.Fatal(err)
	}
	return c, log
}

// enqueueTogether enqueues one task per kind in one batch (one commit, so a poll
// finds them all) and returns their ids in order.
func enqueueTogether(t *testing.T, c *client.Client, kinds ...string) []string {
	t.Helper()
	tasks := make([]client.NewTask, len(kinds))
	for i, k := range kinds {
		tasks[i] = client.NewTask{Payload: k}
	}
	got := must[[]client.Task](t)(c.EnqueueBatch(context.Background(), "q", tasks))
	ids := make([]string, len(got))
	for i, task := range got {
		ids[i] = task.ID
	}
	return ids
}

// TestWorkerPollsFreeSlotsAndPrefetchTogether: a worker whose handlers run short
// asks in one poll for its free slots and its prefetch room (by default as many
// as its slots): two slots idle, it polls for four, two of them prefetch. The
// prefetched tasks wait while both slots are taken, and start after them.
func TestWorkerPollsFreeSlotsAndPrefetchTogether(t *testing.T) {
	t.Parallel()
	c, log := pollLogServer(t, false, client.QueueSettings{})
	g, _ := startGated(t, c, workerConfig("w-mixed", 2))
	warmUp(t, c, "quick", 3)
	ids := enqueueTogether(t, c, "hold", "hold", "quick", "quick")
	g.steps.WaitUntil(t, "both held tasks running and the two others prefetched", func() bool {
		return g.hasStarted(ids[0]) && g.hasStarted(ids[1]) && len(currentTasks(t, c, "w-mixed")) == 4
	})
	if g.hasStarted(ids[2]) || g.hasStarted(ids[3]) {
		t.Fatal("a prefetched task started while both slots were taken")
	}
	mixed := 0
	for _, p := range log.all() {
		n, pre := 1, 0
		if p.req.MaxTasks != nil {
			n = *p.req.MaxTasks
		}
		if p.req.PrefetchTasks != nil {
			pre = *p.req.PrefetchTasks
		}
		if n > 4 || pre > 2 || p.req.Prefetch {
			t.Fatalf("a poll asked for %d tasks, %d prefetch (prefetch %v): beyond two slots and two prefetched", n, pre, p.req.Prefetch)
		}
		if n == 4 && pre == 2 {
			mixed++
		}
	}
	if mixed == 0 {
		t.Fatalf("no poll asked for two free slots and two prefetched together: %+v", log.all())
	}
	close(g.release)
	for _, id := range ids {
		waitTask(t, c, "q", id, 10*time.Second, "task done", status(client.StatusDone))
	}
	// Two slots start the prefetched tasks together: in either order.
	if last := g.order()[len(g.order())-2:]; !slices.Contains(last, ids[2]) || !slices.Contains(last, ids[3]) {
		t.Fatalf("the last handlers started were %v, want the prefetched %v", last, ids[2:])
	}
}

// TestWorkerPollFillsOnlyFreeSlotsFromACappedQueue: the free part of a worker's
// poll takes from a queue with a concurrency cap, its prefetch part does not: a
// one-slot worker that finds two tasks of a capped queue takes one, and an idle
// witness runs the other.
func TestWorkerPollFillsOnlyFreeSlotsFromACappedQueue(t *testing.T) {
	t.Parallel()
	c, log := pollLogServer(t, false, client.QueueSettings{MaxConcurrency: client.Set(4)})
	g, _ := startGated(t, c, workerConfig("w-main", 1))
	warmUp(t, c, "quick", 2)
	ids := enqueueTogether(t, c, "hold", "quick")
	g.steps.WaitUntil(t, "held task running", func() bool { return g.hasStarted(ids[0]) })
	witness := worker(c, "w-witness", 1)
	witness.Handle("q", func(context.Context, *client.Job) error { return nil })
	start(t, witness)
	got := waitTask(t, c, "q", ids[1], 10*time.Second, "next task done", status(client.StatusDone))
	if h := got.AttemptHistory; len(h) != 1 || h[0].WorkerID != "w-witness" {
		t.Fatalf("next task attempts %s, want one by the idle witness", attemptsText(h))
	}
	close(g.release)
	waitTask(t, c, "q", ids[0], 10*time.Second, "held task done", status(client.StatusDone))
	if !slices.ContainsFunc(log.all(), func(p loggedPoll) bool { return p.req.PrefetchTasks != nil && *p.req.PrefetchTasks == 1 }) {
		t.Fatal("the worker never asked for its free slot and a prefetched task together")
	}
}

// TestWorkerPollsAnOlderServer: a server older than prefetch_tasks refuses a poll
// with it (400); the worker then asks for free slots and prefetch room in separate
// polls, as before, once warned, and runs every task; the refused poll's acks are
// sent alone.
func TestWorkerPollsAnOlderServer(t *testing.T) {
	t.Parallel()
	c, log := pollLogServer(t, true, client.QueueSettings{})
	w := client.NewWorker(c, workerConfig("w-old", 4))
	w.Handle("q", func(context.Context, *client.Job) error { return nil })
	start(t, w)
	warmUp(t, c, "quick", 3) // the handlers' times make the worker prefetch
	ids := enqueueTogether(t, c, slices.Repeat([]string{"quick"}, 40)...)
	for _, id := range ids {
		waitTask(t, c, "q", id, 20*time.Second, "task done", status(client.StatusDone))
	}
	polls := log.all()
	first := slices.IndexFunc(polls, func(p loggedPoll) bool { return p.refused })
	if first < 0 {
		t.Fatal("the worker never sent prefetch_tasks; the test proves nothing")
	}
	for _, p := range polls[first+1:] {
		if p.refused || p.req.PrefetchTasks != nil {
			t.Fatalf("after the refusal a poll still carried prefetch_tasks: %+v", p.req)
		}
	}
}
