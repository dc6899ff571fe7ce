package lifecycle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/dispatcher"
	"github.com/taskforge/taskforge/internal/lifecycle"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
	"github.com/taskforge/taskforge/telemetry"
)

// logLine is one captured log record: its message and its attributes as strings.
type logLine struct {
	Msg   string
	Level slog.Level
	Attrs map[string]string
}

// captureHandler keeps every record logged through it.
type captureHandler struct {
	mu    *sync.Mutex
	lines *[]logLine
	attrs []slog.Attr
}

func newCapture() *captureHandler {
	return &captureHandler{mu: &sync.Mutex{}, lines: &[]logLine{}}
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	line := logLine{Msg: r.Message, Level: r.Level, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		line.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		line.Attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.lines = append(*h.lines, line)
	h.mu.Unlock()
	return nil
}

func (h *captureHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &captureHandler{mu: h.mu, lines: h.lines, attrs: append(slices.Clone(h.attrs), attrs...)}
}

func (h *captureHandler) WithGroup(string) slog.Handler { return h }

// matching returns the captured lines of message msg whose attributes include want.
func (h *captureHandler) matching(msg string, want map[string]string) []logLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logLine
	for _, l := range *h.lines {
		if l.Msg != msg {
			continue
		}
		ok := true
		for k, v := range want {
			if l.Attrs[k] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// wfBundle is a lifecycle with telemetry whose logs are captured, on a queue "wf"
// without limits and no retries.
type wfBundle struct {
	bundle
	tel *telemetry.Telemetry
	log *captureHandler
}

func setupWorkflows(t *testing.T) wfBundle {
	t.Helper()
	store := testenv.NewStore(t)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	buf := buffer.New(rdb, testenv.RedisPrefix(t))
	for _, q := range []string{"wf", "wf2"} {
		if _, err := store.CreateQueue(context.Background(), storage.Queue{Name: q, MaxRetries: 0}); err != nil {
			t.Fatal(err)
		}
	}
	capture := newCapture()
	tel := telemetry.New(slog.New(capture))
	w := &lifecycle.RecordingWaker{}
	lc := lifecycle.New(store, buf, w, lifecycle.Config{Telemetry: tel, WakeOnEnqueue: true}, quiet)
	return wfBundle{bundle: bundle{lc: lc, store: store, buf: buf, rdb: rdb, wake: w,
		disp: dispatcher.New(store, buf, lc, nil, dispatcher.Config{}, quiet)}, tel: tel, log: capture}
}

// workflowEvents reads taskforge_workflows_total by event.
func (b wfBundle) workflowEvents(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := b.tel.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "taskforge_workflows_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "event" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func (b wfBundle) wantEvents(t *testing.T, want map[string]float64) {
	t.Helper()
	got := b.workflowEvents(t)
	for _, e := range []string{"submitted", "succeeded", "failed", "cancelled", "resumed"} {
		if got[e] != want[e] {
			t.Errorf("taskforge_workflows_total{event=%q} = %v, want %v (all: %v)", e, got[e], want[e], got)
		}
	}
}

// wantLines fails unless exactly n lines of msg carry want.
func (b wfBundle) wantLines(t *testing.T, n int, msg string, want map[string]string) []logLine {
	t.Helper()
	got := b.log.matching(msg, want)
	if len(got) != n {
		t.Errorf("%d %q lines with %v, want %d; lines of that message: %v", len(got), msg, want, n, b.log.matching(msg, nil))
	}
	return got
}

func wfStep(name, queue string, deps ...string) storage.NewStep {
	return storage.NewStep{Step: name, Queue: queue, DependsOn: deps,
		Task: storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{}`), Priority: 5}}
}

// submit submits a workflow through the lifecycle and returns its id and each
// step's task id by name.
func (b wfBundle) submit(t *testing.T, steps ...storage.NewStep) (uuid.UUID, map[string]uuid.UUID) {
	t.Helper()
	out, err := b.lc.SubmitWorkflow(context.Background(), storage.NewWorkflow{ID: uuid.Must(uuid.NewV7()), Steps: steps})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	ids := map[string]uuid.UUID{}
	for _, st := range out.Workflow.Steps {
		ids[st.Step] = st.TaskID
	}
	return out.Workflow.ID, ids
}

// claimSteps dispatches queue and claims what is due for worker, failing unless the
// claimed steps are exactly want.
func (b wfBundle) claimSteps(t *testing.T, queue, worker string, want ...string) []storage.Task {
	t.Helper()
	ctx := context.Background()
	if _, err := b.disp.DispatchQueues(ctx, queue); err != nil {
		t.Fatal(err)
	}
	limits, ok, err := b.lc.Limits().Get(ctx, queue)
	if err != nil || !ok {
		t.Fatalf("settings of %s: %v %v", queue, ok, err)
	}
	tasks, _, err := b.lc.Claim(ctx, worker, queue, limits, 50, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range tasks {
		name := "" // a plain task
		if tk.Step != nil {
			name = *tk.Step
		}
		got = append(got, name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("claimed steps %v of %s, want %v", got, queue, want)
	}
	return tasks
}

func ackItems(tasks []storage.Task) []storage.AckItem {
	items := make([]storage.AckItem, len(tasks))
	for i, tk := range tasks {
		items[i] = storage.AckItem{TaskID: tk.ID, LeaseToken: *tk.LeaseToken, WorkerID: *tk.ClaimedBy}
	}
	return items
}

func (b wfBundle) ackAll(t *testing.T, tasks []storage.Task) {
	t.Helper()
	out, err := b.lc.AckMany(context.Background(), *tasks[0].ClaimedBy, ackItems(tasks), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		if o.Err != nil {
			t.Fatalf("ack: %v", o.Err)
		}
	}
}

// TestWorkflowSucceededViaAckIsLoggedAndCounted runs a diamond a → (b, c) → d: the
// ack of a logs b and c unblocked, the ack of b and c in one batch logs d unblocked
// once, and the ack of d ends the workflow succeeded inside its statement, which
// the lifecycle logs and counts.
func TestWorkflowSucceededViaAckIsLoggedAndCounted(t *testing.T) {
	t.Parallel()
	b := setupWorkflows(t)
	wf, ids := b.submit(t, wfStep("a", "wf"), wfStep("b", "wf", "a"), wfStep("c", "wf2", "a"), wfStep("d", "wf", "b", "c"))
	b.wantEvents(t, map[string]float64{"submitted": 1})
	b.wantLines(t, 1, "workflow transition", map[string]string{"workflow_id": wf.String(), "from_status": "", "to_status": "running"})

	b.ackAll(t, b.claimSteps(t, "wf", "w", "a"))
	for step, queue := range map[string]string{"b": "wf", "c": "wf2"} {
		b.wantLines(t, 1, "task transition", map[string]string{"task_id": ids[step].String(), "queue": queue,
			"from_status": "blocked", "to_status": "pending", "workflow_id": wf.String(), "step": step, "reason": "dependencies done"})
	}
	// WakeOnEnqueue: the dispatcher is told of both queues the ack fed.
	if due, _ := b.wake.Woken(); !slices.Contains(due, "wf") || !slices.Contains(due, "wf2") {
		t.Errorf("Wake heard %v, want wf and wf2 (the unblocked steps' queues)", due)
	}

	// b and c acked in one statement (one worker's batch, two queues): d is
	// unblocked once.
	both := append(b.claimSteps(t, "wf", "w", "b"), b.claimSteps(t, "wf2", "w", "c")...)
	b.ackAll(t, both)
	b.wantLines(t, 1, "task transition", map[string]string{"task_id": ids["d"].String(),
		"from_status": "blocked", "to_status": "pending", "workflow_id": wf.String(), "step": "d"})
	b.wantLines(t, 0, "workflow transition", map[string]string{"workflow_id": wf.String(), "to_status": "succeeded"})
	b.wantEvents(t, map[string]float64{"submitted": 1})

	b.ackAll(t, b.claimSteps(t, "wf", "w", "d"))
	b.wantLines(t, 1, "workflow transition", map[string]string{"workflow_id": wf.String(), "from_status": "running",
		"to_status": "succeeded", "task_id": ids["d"].String(), "queue": "wf", "step": "d", "reason": "step d done"})
	b.wantEvents(t, map[string]float64{"submitted": 1, "succeeded": 1})
	w, err := b.store.GetWorkflow(context.Background(), wf)
	if err != nil || w.Status != storage.WorkflowSucceeded {
		t.Fatalf("workflow %+v %v, want succeeded", w, err)
	}
}

// TestWorkflowUnblockingInAckBatch acks the roots of three workflows (two fan-outs
// and a fan-in) in one batch, with a plain task among them: every unblocked step is
// logged once with its own workflow, the last root of the fan-in unblocks its join,
// and the plain task's ack carries nothing.
func TestWorkflowUnblockingInAckBatch(t *testing.T) {
	t.Parallel()
	b := setupWorkflows(t)
	ctx := context.Background()
	w1, ids1 := b.submit(t, wfStep("root", "wf"), wfStep("x", "wf", "root"), wfStep("y", "wf2", "root"))
	w2, ids2 := b.submit(t, wfStep("root", "wf"), wfStep("x", "wf", "root"))
	w3, ids3 := b.submit(t, wfStep("p1", "wf"), wfStep("p2", "wf"), wfStep("join", "wf", "p1", "p2"))
	plain := uuid.Must(uuid.NewV7())
	if _, err := b.lc.Enqueue(ctx, "wf", []storage.NewTask{{ID: plain, Payload: json.RawMessage(`{}`), Priority: 5}}, true); err != nil {
		t.Fatal(err)
	}
	claimed := b.claimSteps(t, "wf", "w", "root", "root", "p1", "p2", "")
	b.ackAll(t, claimed)
	want := []struct {
		wf   uuid.UUID
		step string
		id   uuid.UUID
	}{{w1, "x", ids1["x"]}, {w1, "y", ids1["y"]}, {w2, "x", ids2["x"]}, {w3, "join", ids3["join"]}}
	for _, u := range want {
		b.wantLines(t, 1, "task transition", map[string]string{"task_id": u.id.String(), "from_status": "blocked",
			"to_status": "pending", "workflow_id": u.wf.String(), "step": u.step})
	}
	if got := b.log.matching("task transition", map[string]string{"from_status": "blocked"}); len(got) != len(want) {
		t.Errorf("%d unblocking lines, want %d: %v", len(got), len(want), got)
	}
	b.wantLines(t, 1, "task transition", map[string]string{"task_id": plain.String(), "from_status": "executing",
		"to_status": "done"})
	b.wantEvents(t, map[string]float64{"submitted": 3})
}

// TestWorkflowFailedViaNackCascades kills a step with a permanent nack: the nack's
// statement ends the workflow failed and cancels its other steps (blocked, buffered,
// and an executing one flagged); the lifecycle logs each cancelled step, drops the
// buffered one from the buffer, wakes the waiters, and logs and counts the failure.
// Replaying the dead step resumes the workflow, counted as resumed.
func TestWorkflowFailedViaNackCascades(t *testing.T) {
	t.Parallel()
	b := setupWorkflows(t)
	ctx := context.Background()
	wf, ids := b.submit(t, wfStep("a", "wf"), wfStep("b", "wf"), wfStep("buffered", "wf2"),
		wfStep("c", "wf", "a", "b"))
	running := b.claimSteps(t, "wf", "w", "a", "b")
	if _, err := b.disp.DispatchQueues(ctx, "wf2"); err != nil { // "buffered" waits in Redis
		t.Fatal(err)
	}
	var a, other storage.Task
	for _, tk := range running {
		if *tk.Step == "a" {
			a = tk
		} else {
			other = tk
		}
	}
	endedC, leaveC := b.lc.AwaitEnd(ids["c"])
	defer leaveC()
	dead, err := b.lc.Nack(ctx, storage.Nack{TaskID: a.ID, LeaseToken: *a.LeaseToken, WorkerID: "w", Error: "bad", Retryable: false})
	if err != nil || dead.Status != storage.StatusDead {
		t.Fatalf("nack: %+v %v", dead, err)
	}
	b.wantLines(t, 1, "task transition", map[string]string{"task_id": a.ID.String(), "from_status": "executing",
		"to_status": "dead", "workflow_id": wf.String(), "step": "a"})
	for step, from := range map[string]string{"c": "blocked", "buffered": "claimed"} {
		b.wantLines(t, 1, "task transition", map[string]string{"task_id": ids[step].String(), "from_status": from,
			"to_status": "cancelled", "workflow_id": wf.String(), "step": step, "reason": "workflow step a died"})
	}
	// The executing step only has a cancel requested: no transition yet.
	b.wantLines(t, 0, "task transition", map[string]string{"task_id": other.ID.String(), "to_status": "cancelled"})
	b.wantLines(t, 1, "workflow transition", map[string]string{"workflow_id": wf.String(), "from_status": "running",
		"to_status": "failed", "task_id": a.ID.String(), "step": "a", "reason": "step a died"})
	b.wantEvents(t, map[string]float64{"submitted": 1, "failed": 1})
	select {
	case <-endedC:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter of the cascade-cancelled step was not woken")
	}
	if sizes, err := b.buf.Sizes(ctx, []string{"wf2"}); err != nil || sizes["wf2"] != 0 {
		t.Errorf("buffer of wf2 holds %v (%v), want the cancelled step gone", sizes, err)
	}
	// The executing step's worker stops: its nack ends it cancelled; the workflow
	// already ended, so nothing more is counted.
	if _, err := b.lc.Nack(ctx, storage.Nack{TaskID: other.ID, LeaseToken: *other.LeaseToken, WorkerID: "w",
		Error: "stopped", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	b.wantEvents(t, map[string]float64{"submitted": 1, "failed": 1})

	replayed, err := b.lc.Replay(ctx, "wf", []uuid.UUID{a.ID}, false)
	if err != nil || len(replayed) != 1 {
		t.Fatalf("replay: %+v %v", replayed, err)
	}
	b.wantLines(t, 1, "workflow transition", map[string]string{"workflow_id": wf.String(), "from_status": "failed",
		"to_status": "running", "task_id": replayed[0].ID.String(), "step": "a"})
	b.wantEvents(t, map[string]float64{"submitted": 1, "failed": 1, "resumed": 1})
}

// TestWorkflowCancelCascade cancels a waiting step (Cancel) of one workflow and, by
// bulk cancel, a step of another and a plain task: each statement ends its workflow
// cancelled and cancels the other steps; the lifecycle logs every one and counts
// both ends, and a cancel of a whole workflow is logged and counted the same way.
func TestWorkflowCancelCascade(t *testing.T) {
	t.Parallel()
	b := setupWorkflows(t)
	ctx := context.Background()
	w1, ids1 := b.submit(t, wfStep("a", "wf"), wfStep("b", "wf2"), wfStep("c", "wf", "a", "b"))
	if _, err := b.lc.Cancel(ctx, "wf", ids1["a"]); err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"b", "c"} {
		b.wantLines(t, 1, "task transition", map[string]string{"task_id": ids1[step].String(), "to_status": "cancelled",
			"workflow_id": w1.String(), "step": step, "reason": "workflow step a was cancelled"})
	}
	b.wantLines(t, 1, "workflow transition", map[string]string{"workflow_id": w1.String(), "to_status": "cancelled",
		"task_id": ids1["a"].String(), "reason": "step a cancelled"})
	b.wantEvents(t, map[string]float64{"submitted": 1, "cancelled": 1})

	w2, ids2 := b.submit(t, wfStep("a", "wf2"), wfStep("b", "wf", "a"))
	plain := uuid.Must(uuid.NewV7())
	if _, err := b.lc.Enqueue(ctx, "wf2", []storage.NewTask{{ID: plain, Payload: json.RawMessage(`{}`), Priority: 5}}, true); err != nil {
		t.Fatal(err)
	}
	cancelled, _, err := b.lc.CancelMany(ctx, "wf2", lifecycle.CancelSelection{Statuses: []string{storage.StatusPending}})
	if err != nil || cancelled != 2 {
		t.Fatalf("bulk cancel: %d %v, want 2 (a step, a plain task)", cancelled, err)
	}
	b.wantLines(t, 1, "task transition", map[string]string{"task_id": ids2["a"].String(), "to_status": "cancelled",
		"workflow_id": w2.String(), "step": "a", "reason": "cancelled by bulk request"})
	b.wantLines(t, 1, "task transition", map[string]string{"task_id": ids2["b"].String(), "from_status": "blocked",
		"to_status": "cancelled", "workflow_id": w2.String(), "step": "b", "reason": "workflow step a was cancelled"})
	b.wantLines(t, 1, "workflow transition", map[string]string{"workflow_id": w2.String(), "to_status": "cancelled",
		"step": "a"})
	b.wantEvents(t, map[string]float64{"submitted": 2, "cancelled": 2})

	w3, ids3 := b.submit(t, wfStep("a", "wf"), wfStep("b", "wf", "a"))
	if _, err := b.lc.CancelWorkflow(ctx, w3); err != nil {
		t.Fatal(err)
	}
	b.wantLines(t, 1, "task transition", map[string]string{"task_id": ids3["b"].String(), "to_status": "cancelled",
		"reason": "workflow cancelled by request"})
	b.wantLines(t, 1, "workflow transition", map[string]string{"workflow_id": w3.String(), "to_status": "cancelled",
		"reason": "cancelled by request"})
	b.wantEvents(t, map[string]float64{"submitted": 3, "cancelled": 3})
	for _, l := range b.log.matching("workflow transition", nil) {
		if l.Level != slog.LevelInfo || !strings.Contains(fmt.Sprint(l.Attrs), "workflow_id") {
			t.Errorf("workflow transition line %v: want info level with workflow_id", l)
		}
	}
}
