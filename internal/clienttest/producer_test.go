package clienttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/server"
)

// wantErr fails unless err matches every sentinel in want and is an *APIError
// with the given status.
func wantErr(t *testing.T, err error, status int, want ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("error %q does not match %q", err, w)
		}
	}
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %q is not an *APIError", err)
	}
	if apiErr.Status != status || apiErr.Code == "" || apiErr.Message == "" {
		t.Errorf("APIError %+v, want status %d with a code and a message", apiErr, status)
	}
}

func TestQueueCRUD(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()

	q := must[*client.Queue](t)(c.CreateQueue(ctx, "emails", client.QueueSettings{
		MaxRetries: client.Ptr(5), RateLimit: client.Set(2.5), MaxConcurrency: client.Set(4),
		BackoffBase: client.Ptr(250 * time.Millisecond), BackoffMax: client.Ptr(time.Minute)}))
	if q.Name != "emails" || q.MaxRetries != 5 || *q.RateLimit != 2.5 || *q.RateBurst != 3 || *q.MaxConcurrency != 4 ||
		q.BackoffBaseMs != 250 || q.BackoffMaxMs != 60000 || q.Paused {
		t.Fatalf("created %+v", q)
	}
	_, err := c.CreateQueue(ctx, "emails", client.QueueSettings{})
	wantErr(t, err, http.StatusConflict, client.ErrQueueExists)
	_, err = c.CreateQueue(ctx, "bad name", client.QueueSettings{})
	wantErr(t, err, http.StatusBadRequest, client.ErrInvalidRequest)
	_, err = c.CreateQueue(ctx, "x", client.QueueSettings{MaxRetries: client.Ptr(101)})
	wantErr(t, err, http.StatusBadRequest, client.ErrInvalidRequest)
	must[*client.Queue](t)(c.CreateQueue(ctx, "reports", client.QueueSettings{Paused: client.Ptr(true)}))

	qs := must[[]client.Queue](t)(c.ListQueues(ctx))
	if len(qs) != 2 || qs[0].Name != "emails" || qs[1].Name != "reports" || !qs[1].Paused {
		t.Fatalf("list %+v", qs)
	}

	q = must[*client.Queue](t)(c.UpdateQueue(ctx, "emails", client.QueueSettings{PriorityAging: client.Set(90 * time.Second)}))
	if q.PriorityAgingMs == nil || *q.PriorityAgingMs != 90000 || *q.RateLimit != 2.5 {
		t.Fatalf("updated priority aging: %+v", q)
	}
	// Null clears optional limits; absent fields stay.
	q = must[*client.Queue](t)(c.UpdateQueue(ctx, "emails", client.QueueSettings{
		RateLimit: client.Null[float64](), MaxConcurrency: client.Null[int](), MaxRetries: client.Ptr(1),
		PriorityAging: client.Null[time.Duration]()}))
	if q.RateLimit != nil || q.RateBurst != nil || q.MaxConcurrency != nil || q.MaxRetries != 1 || q.BackoffBaseMs != 250 ||
		q.PriorityAgingMs != nil {
		t.Fatalf("updated %+v", q)
	}
	q = must[*client.Queue](t)(c.PauseQueue(ctx, "emails"))
	if !q.Paused {
		t.Fatal("PauseQueue left the queue running")
	}
	if q = must[*client.Queue](t)(c.GetQueue(ctx, "emails")); !q.Paused {
		t.Fatal("GetQueue after pause: not paused")
	}
	if q = must[*client.Queue](t)(c.ResumeQueue(ctx, "emails")); q.Paused {
		t.Fatal("ResumeQueue left the queue paused")
	}
	_, err = c.UpdateQueue(ctx, "nope", client.QueueSettings{Paused: client.Ptr(true)})
	wantErr(t, err, http.StatusNotFound, client.ErrQueueNotFound)
	_, err = c.GetQueue(ctx, "nope")
	wantErr(t, err, http.StatusNotFound, client.ErrQueueNotFound)
	if !strings.Contains(err.Error(), `get queue "nope"`) {
		t.Errorf("error %q does not say what failed", err)
	}

	must[*client.Task](t)(c.Enqueue(ctx, "emails", client.NewTask{Payload: 1}))
	wantErr(t, c.DeleteQueue(ctx, "emails"), http.StatusConflict, client.ErrQueueNotEmpty)
	if err := c.DeleteQueue(ctx, "reports"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, c.DeleteQueue(ctx, "reports"), http.StatusNotFound, client.ErrQueueNotFound)
}

func TestTaskEndpoints(t *testing.T) {
	t.Parallel()
	_, c := setup(t, func(cfg *server.Config) { cfg.MaxPayloadBytes = 1024 })
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{Paused: client.Ptr(true)}))

	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	task := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: map[string]int{"n": 1}, Priority: 2,
		ScheduledAt: at, MaxRetries: client.Ptr(7), Timeout: 1500 * time.Millisecond, IdempotencyKey: "k1"}))
	if task.Status != client.StatusPending || task.Priority != 2 || !task.ScheduledAt.Equal(at) || task.MaxRetries != 7 ||
		*task.TimeoutSeconds != 2 || *task.IdempotencyKey != "k1" || string(task.Payload) != `{"n": 1}` && string(task.Payload) != `{"n":1}` {
		t.Fatalf("enqueued %+v (payload %s)", task, task.Payload)
	}
	// Same key, same request: the same task. Same key, another request: a conflict.
	again := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: map[string]int{"n": 1}, Priority: 2,
		ScheduledAt: at, MaxRetries: client.Ptr(7), Timeout: 1500 * time.Millisecond, IdempotencyKey: "k1"}))
	if again.ID != task.ID {
		t.Fatalf("idempotent enqueue made a second task %s (first %s)", again.ID, task.ID)
	}
	_, err := c.Enqueue(ctx, "q", client.NewTask{Payload: map[string]int{"n": 2}, IdempotencyKey: "k1"})
	wantErr(t, err, http.StatusConflict, client.ErrIdempotencyConflict)
	_, err = c.Enqueue(ctx, "nope", client.NewTask{Payload: 1})
	wantErr(t, err, http.StatusNotFound, client.ErrQueueNotFound)
	_, err = c.Enqueue(ctx, "q", client.NewTask{Payload: strings.Repeat("x", 2000)})
	wantErr(t, err, http.StatusRequestEntityTooLarge, client.ErrPayloadTooLarge)
	_, err = c.Enqueue(ctx, "q", client.NewTask{Payload: 1, Priority: 11})
	wantErr(t, err, http.StatusBadRequest, client.ErrInvalidRequest)
	raw := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: json.RawMessage(`[1,2,3]`)}))
	if string(raw.Payload) != "[1, 2, 3]" && string(raw.Payload) != "[1,2,3]" {
		t.Fatalf("raw payload came back as %s", raw.Payload)
	}

	batch := make([]client.NewTask, 5)
	for i := range batch {
		batch[i] = client.NewTask{Payload: map[string]int{"i": i}}
	}
	created := must[[]client.Task](t)(c.EnqueueBatch(ctx, "q", batch))
	if len(created) != 5 {
		t.Fatalf("batch created %d tasks", len(created))
	}
	// All or nothing: one bad task rejects the batch.
	_, err = c.EnqueueBatch(ctx, "q", []client.NewTask{{Payload: 1}, {Payload: 1, Priority: 99}})
	wantErr(t, err, http.StatusBadRequest, client.ErrInvalidRequest)

	got := must[*client.Task](t)(c.GetTask(ctx, "q", created[2].ID))
	if got.ID != created[2].ID || got.AttemptHistory == nil || len(got.AttemptHistory) != 0 {
		t.Fatalf("get %+v", got)
	}
	_, err = c.GetTask(ctx, "q", "00000000-0000-0000-0000-000000000000")
	wantErr(t, err, http.StatusNotFound, client.ErrTaskNotFound)

	// Pages of 3 over 7 tasks: 3 + 3 + 1, newest first, then AllTasks sees them all.
	page := must[*client.TaskPage](t)(c.ListTasks(ctx, "q", client.TaskFilter{Limit: 3}))
	if len(page.Tasks) != 3 || page.NextCursor == "" || page.Tasks[0].ID != created[4].ID {
		t.Fatalf("first page: %d tasks, cursor %q", len(page.Tasks), page.NextCursor)
	}
	var seen []string
	for task, err := range c.AllTasks(ctx, "q", client.TaskFilter{Limit: 3, Status: client.StatusPending}) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, task.ID)
	}
	if len(seen) != 7 {
		t.Fatalf("AllTasks saw %d tasks, want 7", len(seen))
	}
	none := must[*client.TaskPage](t)(c.ListTasks(ctx, "q", client.TaskFilter{Status: client.StatusDone}))
	if len(none.Tasks) != 0 || none.NextCursor != "" {
		t.Fatalf("done tasks: %+v", none)
	}
	_, err = c.ListTasks(ctx, "q", client.TaskFilter{Status: "bogus"})
	wantErr(t, err, http.StatusBadRequest, client.ErrInvalidRequest)

	cancelled := must[*client.Task](t)(c.CancelTask(ctx, "q", created[0].ID))
	if cancelled.Status != client.StatusCancelled {
		t.Fatalf("cancel: status %s", cancelled.Status)
	}
	_, err = c.CancelTask(ctx, "q", created[0].ID)
	wantErr(t, err, http.StatusConflict, client.ErrTaskNotCancellable)

	st := must[*client.Stats](t)(c.Stats(ctx, "q"))
	if st.Queue != "q" || st.Depth[client.StatusPending] != 6 || st.Depth[client.StatusCancelled] != 1 || st.DLQDepth != 0 {
		t.Fatalf("stats %+v", st)
	}
	_, err = c.Stats(ctx, "nope")
	wantErr(t, err, http.StatusNotFound, client.ErrQueueNotFound)
}

func TestDeadLetterEndpoints(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	var dead []string
	for i := range 4 {
		must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: i}))
	}
	// Kill all four through the worker protocol: a permanent nack.
	for len(dead) < 4 {
		polled := must[*client.PollResult](t)(c.Poll(ctx, client.PollRequest{WorkerID: "w", Queues: []string{"q"}, MaxTasks: 4, Wait: time.Second}))
		for _, p := range polled.Tasks {
			task := must[*client.Task](t)(c.Nack(ctx, client.NackRequest{WorkerID: "w", TaskID: p.ID, LeaseToken: p.LeaseToken,
				Error: "bad input", Permanent: true}))
			if task.Status != client.StatusDead {
				t.Fatalf("permanent nack left the task %s", task.Status)
			}
			dead = append(dead, p.ID)
		}
	}

	page := must[*client.TaskPage](t)(c.ListDead(ctx, "q", 3, ""))
	if len(page.Tasks) != 3 || page.NextCursor == "" || page.Tasks[0].DiedAt == nil || *page.Tasks[0].LastError != "bad input" {
		t.Fatalf("dlq page %+v", page)
	}
	n := 0
	for task, err := range c.AllDead(ctx, "q", 2) {
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != client.StatusDead {
			t.Fatalf("AllDead yielded a %s task", task.Status)
		}
		n++
	}
	if n != 4 {
		t.Fatalf("AllDead saw %d tasks, want 4", n)
	}
	_, err := c.ListDead(ctx, "nope", 0, "")
	wantErr(t, err, http.StatusNotFound, client.ErrQueueNotFound)

	one := must[*client.Task](t)(c.ReplayDead(ctx, "q", dead[0]))
	if one.Status != client.StatusPending || one.ReplayedFrom == nil || *one.ReplayedFrom != dead[0] {
		t.Fatalf("replay one: %+v", one)
	}
	many := must[[]client.Task](t)(c.ReplayDeadTasks(ctx, "q", dead[1:3]))
	if len(many) != 2 || *many[0].ReplayedFrom != dead[1] || *many[1].ReplayedFrom != dead[2] {
		t.Fatalf("replay many: %+v", many)
	}
	_, err = c.ReplayDeadTasks(ctx, "q", []string{dead[3], many[0].ID}) // the second is not dead: none replays
	wantErr(t, err, http.StatusNotFound, client.ErrTaskNotFound)
	all := must[[]client.Task](t)(c.ReplayAllDead(ctx, "q"))
	if len(all) != 4 {
		t.Fatalf("replay all made %d tasks, want 4 (every dead task, replayed before or not)", len(all))
	}
	src := must[*client.Task](t)(c.GetTask(ctx, "q", dead[0]))
	if src.Status != client.StatusDead || src.ReplayCount != 2 || src.ReplayedAt == nil {
		t.Fatalf("replayed dead task: status %s, replay_count %d", src.Status, src.ReplayCount)
	}

	if err := c.DiscardDead(ctx, "q", dead[3]); err != nil {
		t.Fatal(err)
	}
	wantErr(t, c.DiscardDead(ctx, "q", dead[3]), http.StatusNotFound, client.ErrTaskNotFound)
	_, err = c.GetTask(ctx, "q", dead[3])
	wantErr(t, err, http.StatusNotFound, client.ErrTaskNotFound)
}

func TestWorkerProtocolEndpoints(t *testing.T) {
	t.Parallel()
	s, c := setup(t, nil)
	ctx := context.Background()
	must[*client.Queue](t)(c.CreateQueue(ctx, "q", client.QueueSettings{}))
	a := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: "a", Priority: 1}))
	b := must[*client.Task](t)(c.Enqueue(ctx, "q", client.NewTask{Payload: "b", Priority: 2}))

	var polled []client.PolledTask
	for len(polled) < 2 {
		got := must[*client.PollResult](t)(c.Poll(ctx, client.PollRequest{WorkerID: "w1", Queues: []string{"q"}, MaxTasks: 2, Wait: time.Second}))
		polled = append(polled, got.Tasks...)
	}
	if polled[0].ID != a.ID || polled[0].Attempt != 1 || polled[0].LeaseToken == "" || polled[0].HeartbeatIntervalMs != 1000 {
		t.Fatalf("polled %+v", polled[0])
	}
	l := must[*client.LeaseState](t)(c.Heartbeat(ctx, "w1", a.ID, polled[0].LeaseToken))
	if !l.ExpiresAt.After(time.Now().Add(3*time.Second)) || l.CancelRequested {
		t.Fatalf("heartbeat %+v", l)
	}
	if _, err := c.Heartbeat(ctx, "w1", "", ""); err != nil { // worker-only heartbeat
		t.Fatal(err)
	}
	ws := must[[]client.WorkerInfo](t)(c.ListWorkers(ctx))
	if len(ws) != 1 || ws[0].ID != "w1" || len(ws[0].CurrentTasks) != 2 || ws[0].Stale || ws[0].Queues[0] != "q" {
		t.Fatalf("workers %+v", ws)
	}

	_, err := c.Heartbeat(ctx, "w1", a.ID, polled[1].LeaseToken) // b's token on a: stale
	wantErr(t, err, http.StatusConflict, client.ErrLeaseLost)
	done := must[*client.Task](t)(c.Ack(ctx, "w1", a.ID, polled[0].LeaseToken, json.RawMessage(`{"ok":true}`)))
	if done.Status != client.StatusDone || !strings.Contains(string(done.Result), "ok") {
		t.Fatalf("ack %+v", done)
	}
	_, err = c.Ack(ctx, "w1", a.ID, polled[0].LeaseToken, nil)
	wantErr(t, err, http.StatusConflict, client.ErrLeaseLost)

	retry := must[*client.Task](t)(c.Nack(ctx, client.NackRequest{WorkerID: "w1", TaskID: b.ID, LeaseToken: polled[1].LeaseToken,
		Error: "try later", RetryAfter: client.Ptr(time.Hour)}))
	if retry.Status != client.StatusRetry || retry.ScheduledAt.Before(time.Now().Add(59*time.Minute)) {
		t.Fatalf("nack: %s, next at %s", retry.Status, retry.ScheduledAt)
	}
	_, err = c.Nack(ctx, client.NackRequest{WorkerID: "w1", TaskID: b.ID, LeaseToken: polled[1].LeaseToken, Error: "again"})
	wantErr(t, err, http.StatusConflict, client.ErrLeaseLost)
	_, err = c.Poll(ctx, client.PollRequest{WorkerID: "", Queues: []string{"q"}})
	wantErr(t, err, http.StatusBadRequest, client.ErrInvalidRequest)

	// A rate-limited queue with waiting work says when its next token comes.
	must[*client.Queue](t)(c.CreateQueue(ctx, "slow", client.QueueSettings{RateLimit: client.Set(0.5)}))
	must[[]client.Task](t)(c.EnqueueBatch(ctx, "slow", []client.NewTask{{Payload: 1}, {Payload: 2}}))
	var first *client.PollResult
	for first == nil || len(first.Tasks) == 0 {
		first = must[*client.PollResult](t)(c.Poll(ctx, client.PollRequest{WorkerID: "w2", Queues: []string{"slow"}, MaxTasks: 2, Wait: time.Second}))
	}
	if len(first.Tasks) != 1 {
		t.Fatalf("a burst of 1 handed out %d tasks", len(first.Tasks))
	}
	var held *client.PollResult
	// The dispatcher's passes move the second task into the buffer.
	s.Signals.DispatchPass.WaitUntil(t, "the second task buffered", func() bool {
		held = must[*client.PollResult](t)(c.Poll(ctx, client.PollRequest{WorkerID: "w2", Queues: []string{"slow"}}))
		return len(held.Tasks) == 0 && held.RetryAfter > 0
	})
	if held.RetryAfter > 2*time.Second {
		t.Fatalf("retry after %s at 0.5 tasks/s", held.RetryAfter)
	}
}

func TestHealthAndUnreachableServer(t *testing.T) {
	t.Parallel()
	_, c := setup(t, nil)
	ctx := context.Background()
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Readyz(ctx); err != nil {
		t.Fatal(err)
	}

	// A port nothing listens on: every call fails fast with ErrUnavailable.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dead := must[*client.Client](t)(client.New("http://" + addr))
	for name, call := range map[string]func() error{
		"healthz": func() error { return dead.Healthz(ctx) },
		"readyz":  func() error { return dead.Readyz(ctx) },
		"list":    func() error { _, err := dead.ListQueues(ctx); return err },
		"enqueue": func() error { _, err := dead.Enqueue(ctx, "q", client.NewTask{Payload: 1}); return err },
		"poll": func() error {
			_, err := dead.Poll(ctx, client.PollRequest{WorkerID: "w", Queues: []string{"q"}})
			return err
		},
		"dlq replay": func() error { _, err := dead.ReplayAllDead(ctx, "q"); return err },
	} {
		err := call()
		if !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("%s against a closed port: %v, want ErrUnavailable", name, err)
		}
		var apiErr *client.APIError
		if errors.As(err, &apiErr) {
			t.Errorf("%s: a request without a response gave an APIError %+v", name, apiErr)
		}
	}
	// A cancelled context is reported as such, not as an outage.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.ListQueues(cctx); !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrUnavailable) {
		t.Errorf("cancelled call: %v", err)
	}

	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://x", "http://"} {
		if _, err := client.New(bad); err == nil {
			t.Errorf("New(%q) accepted a bad URL", bad)
		}
	}
}

// TestAPIErrorIs checks the code → sentinel table, including statuses of
// proxies that answer without the API's JSON error body.
func TestAPIErrorIs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  *client.APIError
		want error
	}{
		{&client.APIError{Status: 400, Code: "invalid_request"}, client.ErrInvalidRequest},
		{&client.APIError{Status: 413, Code: "payload_too_large"}, client.ErrPayloadTooLarge},
		{&client.APIError{Status: 404, Code: "queue_not_found"}, client.ErrQueueNotFound},
		{&client.APIError{Status: 409, Code: "queue_exists"}, client.ErrQueueExists},
		{&client.APIError{Status: 409, Code: "queue_not_empty"}, client.ErrQueueNotEmpty},
		{&client.APIError{Status: 404, Code: "task_not_found"}, client.ErrTaskNotFound},
		{&client.APIError{Status: 409, Code: "task_not_cancellable"}, client.ErrTaskNotCancellable},
		{&client.APIError{Status: 409, Code: "idempotency_conflict"}, client.ErrIdempotencyConflict},
		{&client.APIError{Status: 409, Code: "lease_lost"}, client.ErrLeaseLost},
		{&client.APIError{Status: 503, Code: "unavailable"}, client.ErrUnavailable},
		{&client.APIError{Status: 502, Code: "http_502"}, client.ErrUnavailable},
		{&client.APIError{Status: 504, Code: "whatever"}, client.ErrUnavailable},
		{&client.APIError{Status: 500, Code: "internal"}, client.ErrInternal},
		{&client.APIError{Status: 404, Code: "not_found"}, client.ErrNotFound},
	}
	for _, tc := range cases {
		wrapped := fmt.Errorf("op: %w", tc.err)
		if !errors.Is(wrapped, tc.want) {
			t.Errorf("%+v does not match %v", tc.err, tc.want)
		}
		if errors.Is(wrapped, client.ErrLeaseLost) != (tc.want == client.ErrLeaseLost) {
			t.Errorf("%+v matches ErrLeaseLost", tc.err)
		}
	}
}
