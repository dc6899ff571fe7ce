package storage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

func step(name, queue string, deps ...string) storage.NewStep {
	return storage.NewStep{Step: name, Queue: queue, DependsOn: deps,
		Task: storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{"step":"` + name + `"}`), Priority: 5}}
}

func submit(t *testing.T, s *storage.Store, steps ...storage.NewStep) storage.Workflow {
	t.Helper()
	out, err := s.SubmitWorkflow(context.Background(), storage.NewWorkflow{ID: uuid.Must(uuid.NewV7()), Steps: steps})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return out.Workflow
}

func workflowStore(t *testing.T, queues ...string) *storage.Store {
	t.Helper()
	s := testenv.NewStore(t)
	for _, q := range queues {
		if _, err := s.CreateQueue(context.Background(), storage.Queue{Name: q, MaxRetries: 0, BackoffBaseMs: 10, BackoffMaxMs: 100}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// runOne dispatches and claims every due task of queue for worker, returning them.
func claimAll(t *testing.T, s *storage.Store, queue, worker string) []storage.Task {
	t.Helper()
	ctx := context.Background()
	due, err := s.DispatchDue(ctx, queue, 2000, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, len(due))
	for i, d := range due {
		ids[i] = d.ID
	}
	claimed, err := testenv.Claim(ctx, s, ids, worker, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return claimed
}

func ack(t *testing.T, s *storage.Store, task storage.Task) storage.Task {
	t.Helper()
	done, err := s.Ack(context.Background(), *task.ClaimedBy, task.ID, *task.LeaseToken, json.RawMessage(`{"ok":true}`))
	if err != nil {
		t.Fatalf("ack %s: %v", *task.Step, err)
	}
	return done
}

func stepStatuses(t *testing.T, s *storage.Store, id uuid.UUID) map[string]string {
	t.Helper()
	w, err := s.GetWorkflow(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{"workflow": w.Status}
	for _, st := range w.Steps {
		out[st.Step] = *st.Status
	}
	return out
}

func wantStatuses(t *testing.T, s *storage.Store, id uuid.UUID, want map[string]string) {
	t.Helper()
	got := stepStatuses(t, s, id)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: status %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

func stepNames(tasks []storage.Task) string {
	var names []string
	for _, t := range tasks {
		names = append(names, *t.Step)
	}
	return strings.Join(names, ",")
}

func TestWorkflowValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []storage.NewStep
		want  string
	}{
		{"empty", nil, "1 to 1000 steps"},
		{"bad name", []storage.NewStep{step("bad name", "q")}, `step "bad name" must match`},
		{"duplicate", []storage.NewStep{step("a", "q"), step("a", "q")}, `duplicate step "a"`},
		{"unknown dependency", []storage.NewStep{step("a", "q", "zz")}, `depends on "zz", which is no step`},
		{"self", []storage.NewStep{step("a", "q", "a")}, "depends on itself"},
		{"cycle", []storage.NewStep{step("a", "q", "c"), step("b", "q", "a"), step("c", "q", "b"), step("d", "q")},
			"cycle: a → c → b → a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := storage.ValidateSteps(tc.steps)
			var invalid *storage.InvalidWorkflowError
			if !errors.As(err, &invalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestWorkflowDiamond: a → (b, c) → d runs in dependency order, and the workflow
// succeeds with its last step.
func TestWorkflowDiamond(t *testing.T) {
	s := workflowStore(t, "q")
	w := submit(t, s, step("a", "q"), step("b", "q", "a"), step("c", "q", "a"), step("d", "q", "b", "c"))
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "running", "a": "pending", "b": "blocked", "c": "blocked", "d": "blocked"})

	got := claimAll(t, s, "q", "w1")
	if stepNames(got) != "a" {
		t.Fatalf("first dispatch: %s, want a", stepNames(got))
	}
	ack(t, s, got[0])
	got = claimAll(t, s, "q", "w1")
	if len(got) != 2 {
		t.Fatalf("after a: %s, want b and c", stepNames(got))
	}
	ack(t, s, got[0])
	if more := claimAll(t, s, "q", "w1"); len(more) != 0 {
		t.Fatalf("d dispatched before both b and c were done: %s", stepNames(more))
	}
	wantStatuses(t, s, w.ID, map[string]string{"d": "blocked"})
	ack(t, s, got[1])
	got = claimAll(t, s, "q", "w1")
	if stepNames(got) != "d" {
		t.Fatalf("after b and c: %s, want d", stepNames(got))
	}
	ack(t, s, got[0])
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "succeeded", "a": "done", "b": "done", "c": "done", "d": "done"})
	checkTally(t, s, "q")
}

func checkTally(t *testing.T, s *storage.Store, queue string) {
	t.Helper()
	drift, err := s.TallyDrift(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	if len(drift) > 0 {
		t.Fatalf("queue %s: kept counts drift from the rows: %v", queue, drift)
	}
}

// TestWorkflowConcurrentParentAcks: two parents acked at once unblock their child
// exactly once, whichever commits last.
func TestWorkflowConcurrentParentAcks(t *testing.T) {
	s := workflowStore(t, "q")
	ctx := context.Background()
	for round := 0; round < 30; round++ {
		w := submit(t, s, step("b", "q"), step("c", "q"), step("d", "q", "b", "c"))
		got := claimAll(t, s, "q", "w")
		if len(got) != 2 {
			t.Fatalf("round %d: claimed %s", round, stepNames(got))
		}
		var wg sync.WaitGroup
		for _, task := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Ack(ctx, *task.ClaimedBy, task.ID, *task.LeaseToken, nil); err != nil {
					t.Errorf("ack: %v", err)
				}
			}()
		}
		wg.Wait()
		wantStatuses(t, s, w.ID, map[string]string{"d": "pending"})
		d := claimAll(t, s, "q", "w")
		if stepNames(d) != "d" {
			t.Fatalf("round %d: after both acks dispatched %q, want d once", round, stepNames(d))
		}
		ack(t, s, d[0])
		wantStatuses(t, s, w.ID, map[string]string{"workflow": "succeeded"})
	}
	checkTally(t, s, "q")
}

// TestWorkflowFailureCascadeAndResume: a dead step cancels the waiting steps, flags
// the executing sibling, fails the workflow; replaying the dead step resumes it
// and the done step never runs again.
func TestWorkflowFailureCascadeAndResume(t *testing.T) {
	s := workflowStore(t, "q")
	ctx := context.Background()
	// a → (b, c) → d, e after d
	w := submit(t, s, step("a", "q"), step("b", "q", "a"), step("c", "q", "a"), step("d", "q", "b", "c"), step("e", "q", "d"))
	a := claimAll(t, s, "q", "w")
	ack(t, s, a[0])
	bc := claimAll(t, s, "q", "w")
	var b, c storage.Task
	for _, x := range bc {
		if *x.Step == "b" {
			b = x
		} else {
			c = x
		}
	}
	dead, err := s.Nack(ctx, storage.Nack{TaskID: b.ID, LeaseToken: *b.LeaseToken, WorkerID: "w", Error: "boom", Retryable: false})
	if err != nil || dead.Status != storage.StatusDead {
		t.Fatalf("nack: %v %v", dead.Status, err)
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "failed", "a": "done", "b": "dead", "c": "executing", "d": "cancelled", "e": "cancelled"})
	wf, _ := s.GetWorkflow(ctx, w.ID)
	for _, st := range wf.Steps {
		if st.Step == "d" && (st.LastError == nil || *st.LastError != "workflow step b died") {
			t.Errorf("d's last_error %v, want it to name b", st.LastError)
		}
	}
	cTask, _, _ := s.GetTask(ctx, "q", c.ID)
	if !cTask.CancelRequested {
		t.Errorf("executing sibling c: cancel_requested false")
	}
	// c's worker stops: its step ends cancelled; the workflow stays failed.
	if _, err := s.Nack(ctx, storage.Nack{TaskID: c.ID, LeaseToken: *c.LeaseToken, WorkerID: "w", Error: "stopped", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "failed", "c": "cancelled"})
	checkTally(t, s, "q")

	replayed, err := s.Replay(ctx, "q", []uuid.UUID{b.ID}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(replayed) != 1 || *replayed[0].ReplayedFrom != b.ID || *replayed[0].Step != "b" || replayed[0].Status != "pending" {
		t.Fatalf("replay: %+v", replayed)
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "running", "a": "done", "b": "pending", "c": "pending", "d": "blocked", "e": "blocked"})
	wf, _ = s.GetWorkflow(ctx, w.ID)
	if wf.Steps[1].TaskID != replayed[0].ID || wf.Steps[0].TaskID != a[0].ID {
		t.Errorf("steps[].task_id not the replay / the done task: %+v", wf.Steps)
	}
	for round := 0; round < 3; round++ {
		got := claimAll(t, s, "q", "w")
		for _, x := range got {
			if *x.Step == "a" {
				t.Fatal("done step a ran again")
			}
			ack(t, s, x)
		}
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "succeeded", "a": "done", "b": "done", "c": "done", "d": "done", "e": "done"})
	checkTally(t, s, "q")
}

func TestWorkflowCancel(t *testing.T) {
	s := workflowStore(t, "q")
	ctx := context.Background()
	w := submit(t, s, step("a", "q"), step("b", "q"), step("c", "q", "a"))
	got := claimAll(t, s, "q", "w") // a and b execute
	_, steps, err := s.CancelWorkflow(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 {
		t.Errorf("cancel changed %d steps, want 3", len(steps))
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "cancelled", "a": "executing", "b": "executing", "c": "cancelled"})
	for _, x := range got {
		task, _, _ := s.GetTask(ctx, "q", x.ID)
		if !task.CancelRequested {
			t.Errorf("%s: cancel_requested false", *x.Step)
		}
	}
	// An ack still records done (the work happened); the workflow stays cancelled.
	ack(t, s, got[0])
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "cancelled", *got[0].Step: "done"})
	if _, _, err := s.CancelWorkflow(ctx, w.ID); !errors.Is(err, storage.ErrWorkflowNotCancellable) {
		t.Errorf("second cancel: %v", err)
	}
	if _, _, err := s.CancelWorkflow(ctx, uuid.New()); !errors.Is(err, storage.ErrWorkflowNotFound) {
		t.Errorf("unknown workflow: %v", err)
	}
	checkTally(t, s, "q")
}

// TestWorkflowCancelStepCascades: cancelling one waiting step cancels its workflow.
func TestWorkflowCancelStepCascades(t *testing.T) {
	s := workflowStore(t, "q")
	ctx := context.Background()
	w := submit(t, s, step("a", "q"), step("b", "q", "a"))
	if _, err := s.CancelTask(ctx, "q", w.Steps[1].TaskID); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "cancelled", "a": "cancelled", "b": "cancelled"})
}

func TestWorkflowSubmitErrors(t *testing.T) {
	s := workflowStore(t, "q")
	ctx := context.Background()
	_, err := s.SubmitWorkflow(ctx, storage.NewWorkflow{ID: uuid.New(), Steps: []storage.NewStep{step("a", "q"), step("b", "nope", "a")}})
	var missing *storage.QueueNotFoundError
	if !errors.As(err, &missing) || missing.Queue != "nope" {
		t.Fatalf("unknown queue: %v", err)
	}
	key := "k1"
	nw := storage.NewWorkflow{ID: uuid.New(), IdempotencyKey: &key, Fingerprint: []byte{1}, Steps: []storage.NewStep{step("a", "q")}}
	first, err := s.SubmitWorkflow(ctx, nw)
	if err != nil || !first.Created {
		t.Fatal(err)
	}
	nw.ID = uuid.New()
	again, err := s.SubmitWorkflow(ctx, nw)
	if err != nil || again.Created || again.Workflow.ID != first.Workflow.ID {
		t.Fatalf("repeat: %+v %v", again, err)
	}
	nw.Fingerprint = []byte{2}
	if _, err := s.SubmitWorkflow(ctx, nw); !errors.Is(err, storage.ErrIdempotencyConflict) {
		t.Fatalf("conflict: %v", err)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM all_tasks`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("tasks after the failed submissions: %d %v", n, err)
	}
}

// TestWorkflowWide: a 1,000-step fan-out / fan-in is submitted in one transaction,
// fast, and its sink runs only after every one of its 998 parents.
func TestWorkflowWide(t *testing.T) {
	s := workflowStore(t, "q")
	ctx := context.Background()
	steps := []storage.NewStep{step("src", "q")}
	var mids []string
	for i := 0; i < 998; i++ {
		name := fmt.Sprintf("m%d", i)
		mids = append(mids, name)
		steps = append(steps, step(name, "q", "src"))
	}
	steps = append(steps, step("sink", "q", mids...))
	start := time.Now()
	w := submit(t, s, steps...)
	took := time.Since(start)
	t.Logf("submitted 1,000 steps in %v", took)
	if took > time.Second { // the target is 200 ms; -race and a shared box slow it
		t.Errorf("submit took %v", took)
	}
	ack(t, s, claimAll(t, s, "q", "w")[0])
	got := claimAll(t, s, "q", "w")
	if len(got) != 998 {
		t.Fatalf("fan-out dispatched %d, want 998", len(got))
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(got); i += 8 {
				if _, err := s.Ack(ctx, *got[i].ClaimedBy, got[i].ID, *got[i].LeaseToken, nil); err != nil {
					t.Errorf("ack: %v", err)
				}
				if i == len(got)-1 {
					continue
				}
			}
		}()
	}
	wg.Wait()
	sink := claimAll(t, s, "q", "w")
	if stepNames(sink) != "sink" {
		t.Fatalf("fan-in dispatched %q", stepNames(sink))
	}
	ack(t, s, sink[0])
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "succeeded"})
	checkTally(t, s, "q")
}

func TestWorkflowRetention(t *testing.T) {
	s := workflowStore(t, "q")
	ctx := context.Background()
	done := submit(t, s, step("a", "q"), step("b", "q", "a"))
	running := submit(t, s, step("x", "q"), step("y", "q", "x"))
	for _, task := range claimAll(t, s, "q", "w") {
		if *task.Step == "a" {
			ack(t, s, task)
		}
	}
	ack(t, s, claimAll(t, s, "q", "w")[0])
	wantStatuses(t, s, done.ID, map[string]string{"workflow": "succeeded"})
	// x finished long ago as far as plain retention is concerned: it must stay.
	// (The done tasks are in history, their attempts keyed by their finished_at.)
	if _, err := s.Pool().Exec(ctx, `WITH moved AS (
			UPDATE task_history SET finished_at = now() - interval '1 day' WHERE workflow_id IS NOT NULL AND status = 'done'
			RETURNING id)
		UPDATE attempt_history SET task_finished_at = now() - interval '1 day' WHERE task_id IN (SELECT id FROM moved)`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteExpiredTasks(ctx, storage.DefaultRetention(time.Hour), 100, time.Second); err != nil || n != 0 {
		t.Fatalf("plain retention deleted %d workflow tasks (%v)", n, err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE workflows SET finished_at = now() - interval '1 day' WHERE status <> 'running'`); err != nil {
		t.Fatal(err)
	}
	n, err := s.DeleteExpiredWorkflows(ctx, storage.DefaultRetention(time.Hour), 10, time.Second)
	if err != nil || n != 1 {
		t.Fatalf("deleted %d workflows (%v), want 1", n, err)
	}
	if _, err := s.GetWorkflow(ctx, done.ID); !errors.Is(err, storage.ErrWorkflowNotFound) {
		t.Errorf("expired workflow: %v", err)
	}
	var left int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM all_tasks WHERE workflow_id = $1`, done.ID).Scan(&left); err != nil || left != 0 {
		t.Errorf("tasks of the deleted workflow left: %d", left)
	}
	if _, err := s.GetWorkflow(ctx, running.ID); err != nil {
		t.Errorf("running workflow: %v", err)
	}
	checkTally(t, s, "q")
}

// BenchmarkWorkflowSubmit1000 submits a 1,000-step fan-out / fan-in (one source,
// 998 middle steps, one sink): one transaction, a handful of statements.
func BenchmarkWorkflowSubmit1000(b *testing.B) {
	s := testenv.NewStore(b)
	if _, err := s.CreateQueue(context.Background(), storage.Queue{Name: "q", MaxRetries: 3, BackoffBaseMs: 10, BackoffMaxMs: 100}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		steps := []storage.NewStep{step("src", "q")}
		var mids []string
		for j := 0; j < 998; j++ {
			name := fmt.Sprintf("m%d", j)
			mids = append(mids, name)
			steps = append(steps, step(name, "q", "src"))
		}
		steps = append(steps, step("sink", "q", mids...))
		b.StartTimer()
		if _, err := s.SubmitWorkflow(context.Background(), storage.NewWorkflow{ID: uuid.Must(uuid.NewV7()), Steps: steps}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWorkflowReclaimedDeadStepFailsWorkflow: a step whose lease expired with no
// budget left dies in the watchdog's statement, and its workflow fails with it.
func TestWorkflowReclaimedDeadStepFailsWorkflow(t *testing.T) {
	s := workflowStore(t, "q") // max_retries 0
	ctx := context.Background()
	w := submit(t, s, step("a", "q"), step("b", "q"), step("c", "q", "a", "b"))
	got := claimAll(t, s, "q", "w")
	if len(got) != 2 {
		t.Fatalf("claimed %s", stepNames(got))
	}
	var a storage.Task
	for _, x := range got {
		if *x.Step == "a" {
			a = x
		}
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, a.ID); err != nil {
		t.Fatal(err)
	}
	reclaimed, err := s.ReclaimExpired(ctx, 10)
	if err != nil || len(reclaimed) != 1 || reclaimed[0].Status != storage.StatusDead || *reclaimed[0].Step != "a" {
		t.Fatalf("reclaim: %+v %v", reclaimed, err)
	}
	// The reclaim reports what it did to the workflow: failed, b flagged, c cancelled.
	fx := reclaimed[0].Effects
	if fx == nil || fx.WorkflowEnded != storage.WorkflowFailed || len(fx.Unblocked) != 0 || cascadedSteps(fx) != "b:executing,c:blocked" {
		t.Errorf("reclaim effects %+v, want failed with b (executing) and c (blocked) cascaded", fx)
	}
	wantStatuses(t, s, w.ID, map[string]string{"workflow": "failed", "a": "dead", "b": "executing", "c": "cancelled"})
	checkTally(t, s, "q")
}

// cascadedSteps lists fx's cascaded steps as step:from_status, in step order.
func cascadedSteps(fx *storage.StepEffects) string {
	var out []string
	for _, c := range fx.Cascaded {
		out = append(out, *c.Step+":"+c.FromStatus)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// TestWorkflowStatementEffects checks what the transition statements report beside
// their tasks: nothing for a plain task; for an ack batch finishing both parents of
// a join, the join unblocked once (with the first parent in id order); the end of
// the workflow with its last ack; and for a cancel, the cascade and the end.
func TestWorkflowStatementEffects(t *testing.T) {
	s := workflowStore(t, "q")
	ctx := context.Background()
	w := submit(t, s, step("p1", "q"), step("p2", "q"), step("join", "q", "p1", "p2"))
	if _, err := s.Enqueue(ctx, "q", []storage.NewTask{{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{}`), Priority: 5}}, nil); err != nil {
		t.Fatal(err)
	}
	got := claimAll(t, s, "q", "w")
	if len(got) != 3 {
		t.Fatalf("claimed %d tasks, want p1, p2 and the plain task", len(got))
	}
	items := make([]storage.AckItem, len(got))
	first := uuid.Max
	for i, x := range got {
		items[i] = storage.AckItem{TaskID: x.ID, LeaseToken: *x.LeaseToken, WorkerID: "w"}
		if x.Step != nil && bytes.Compare(x.ID[:], first[:]) < 0 {
			first = x.ID
		}
	}
	acked, err := s.AckMany(ctx, items, false)
	if err != nil || len(acked) != 3 {
		t.Fatalf("ack: %d %v", len(acked), err)
	}
	for id, x := range acked {
		switch {
		case x.Step == nil && x.Effects != nil:
			t.Errorf("plain task's ack reports %+v", x.Effects)
		case x.Step != nil && id == first:
			if x.Effects == nil || len(x.Effects.Unblocked) != 1 || x.Effects.Unblocked[0].Step != "join" ||
				x.Effects.Unblocked[0].ID != w.Steps[2].TaskID || x.Effects.Unblocked[0].Queue != "q" || x.Effects.WorkflowEnded != "" {
				t.Errorf("ack of %s (first parent) reports %+v, want join unblocked", *x.Step, x.Effects)
			}
		case x.Step != nil && x.Effects != nil:
			t.Errorf("ack of %s (second parent) reports %+v, want nothing (join comes with the first)", *x.Step, x.Effects)
		}
	}
	join := claimAll(t, s, "q", "w")
	done := ack(t, s, join[0])
	if done.Effects == nil || done.Effects.WorkflowEnded != storage.WorkflowSucceeded || len(done.Effects.Unblocked) != 0 {
		t.Errorf("last ack reports %+v, want the workflow succeeded", done.Effects)
	}

	w2 := submit(t, s, step("a", "q"), step("b", "q", "a"))
	c, err := s.CancelTask(ctx, "q", w2.Steps[0].TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if fx := c.Effects; fx == nil || fx.WorkflowEnded != storage.WorkflowCancelled || cascadedSteps(fx) != "b:blocked" ||
		fx.Cascaded[0].ID != w2.Steps[1].TaskID || *fx.Cascaded[0].WorkflowID != w2.ID {
		t.Errorf("cancel reports %+v, want the workflow cancelled with b cascaded", fx)
	}
}
