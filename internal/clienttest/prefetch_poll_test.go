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
	// out is how many polls are out now, asking for outAsked tasks in all;
	// mostOut and mostAsked the most that were at once.
	out, mostOut, outAsked, mostAsked int
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
	n, _ := asked(lp)
	p.mu.Lock()
	p.out++
	p.outAsked += n
	p.mostOut, p.mostAsked = max(p.mostOut, p.out), max(p.mostAsked, p.outAsked)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.out--
		p.outAsked -= n
		p.mu.Unlock()
	}()
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

// most is the most polls that were out at once, and the most tasks the polls
// out at once asked for.
func (p *pollLog) most() (polls, tasks int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mostOut, p.mostAsked
}

// drainLogged enqueues n no-op tasks in batches of 500, runs a worker with cfg
// on them until all are done, and returns what its polls asked for.
func drainLogged(t *testing.T, cfg client.WorkerConfig, n int) *pollLog {
	t.Helper()
	c, log := pollLogServer(t, false, client.QueueSettings{})
	for done := 0; done < n; done += 500 {
		enqueueTogether(t, c, slices.Repeat([]string{"quick"}, min(500, n-done))...)
	}
	w := client.NewWorker(c, cfg)
	w.Handle("q", func(context.Context, *client.Job) error { return nil })
	start(t, w)
	testserver.Eventually(t, 60*time.Second, "every task done", func() bool {
		st, err := c.Stats(context.Background(), "q")
		return err == nil && st.Depth[client.StatusDone] == int64(n)
	})
	return log
}

// asked is what a poll asked for: all its tasks, and the prefetch among them.
func asked(p loggedPoll) (n, prefetch int) {
	n = 1
	if p.req.MaxTasks != nil {
		n = *p.req.MaxTasks
	}
	if p.req.PrefetchTasks != nil {
		prefetch = *p.req.PrefetchTasks
	}
	return n, prefetch
}

// TestWorkerPrefetchAdaptsToHandlersThatOutrunPolls: a worker left to its
// default prefetch, whose handlers return before a poll's answer comes back,
// raises its prefetch room beyond its slots, so that its polls ask for more
// than twice its slots (at most a full poll of 100); with the prefetch set, its
// polls out at once never ask beyond its slots and that prefetch.
func TestWorkerPrefetchAdaptsToHandlersThatOutrunPolls(t *testing.T) {
	t.Parallel()
	const slots, tasks = 4, 2000
	t.Run("default", func(t *testing.T) {
		t.Parallel()
		log := drainLogged(t, workerConfig("w-adapt", slots), tasks)
		most, polls := 0, log.all()
		for _, p := range polls {
			n, _ := asked(p)
			if n > 100 {
				t.Fatalf("a poll asked for %d tasks, beyond a full poll", n)
			}
			most = max(most, n)
		}
		out, _ := log.most()
		t.Logf("%d tasks took %d polls; the largest asked for %d tasks; at most %d polls out at once", tasks, len(polls), most, out)
		if most <= 2*slots {
			t.Fatalf("no poll asked for more than %d tasks (%d slots and as many prefetched): the prefetch room never grew", most, slots)
		}
	})
	t.Run("set", func(t *testing.T) {
		t.Parallel()
		cfg := workerConfig("w-fixed", slots)
		cfg.Prefetch = slots
		log := drainLogged(t, cfg, tasks/4)
		for _, p := range log.all() {
			if n, pre := asked(p); n > 2*slots || pre > slots {
				t.Fatalf("a poll asked for %d tasks, %d of them prefetch: beyond %d slots and Prefetch %d", n, pre, slots, slots)
			}
		}
		if _, most := log.most(); most > 2*slots {
			t.Fatalf("the polls out at once asked for %d tasks: beyond %d slots and Prefetch %d", most, slots, slots)
		}
	})
}

// TestWorkerKeepsASecondPollOut: a worker whose handlers outrun its polls, on a
// queue with work, sends its next poll while the last is still out, and never
// has more than two out.
func TestWorkerKeepsASecondPollOut(t *testing.T) {
	t.Parallel()
	log := drainLogged(t, workerConfig("w-pipeline", 16), 3000)
	if most, _ := log.most(); most != 2 {
		t.Fatalf("at most %d polls were out at once, want 2", most)
	}
}
