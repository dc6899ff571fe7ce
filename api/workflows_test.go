package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testserver"
)

type workflowView struct {
	ID             string     `json:"id"`
	Name           *string    `json:"name"`
	Status         string     `json:"status"`
	IdempotencyKey *string    `json:"idempotency_key"`
	CreatedAt      time.Time  `json:"created_at"`
	FinishedAt     *time.Time `json:"finished_at"`
	Steps          []struct {
		Step      string          `json:"step"`
		Queue     string          `json:"queue"`
		TaskID    string          `json:"task_id"`
		Status    string          `json:"status"`
		DependsOn []string        `json:"depends_on"`
		Attempts  int             `json:"attempts"`
		Result    json.RawMessage `json:"result"`
		LastError *string         `json:"last_error"`
	} `json:"steps"`
}

func (w workflowView) step(name string) (i int) {
	for i := range w.Steps {
		if w.Steps[i].Step == name {
			return i
		}
	}
	return -1
}

func getWorkflow(t *testing.T, s *testserver.Instance, id string) workflowView {
	t.Helper()
	var w workflowView
	s.Must(200, "GET", "/workflows/"+id, nil).JSON(t, &w)
	return w
}

func diamond(queue string) map[string]any {
	st := func(name string, deps ...string) map[string]any {
		m := map[string]any{"step": name, "queue": queue, "payload": map[string]any{"step": name}}
		if len(deps) > 0 {
			m["depends_on"] = deps
		}
		return m
	}
	return map[string]any{"name": "diamond", "steps": []any{st("a"), st("b", "a"), st("c", "a"), st("d", "b", "c")}}
}

// TestWorkflowDiamondRunsInDependencyOrder: a → (b, c) → d over HTTP with two
// workers; each step starts only after all its dependencies are done (attempt
// times, on the database clock), the worker of d reads b's and c's results from
// the workflow, and the workflow succeeds.
func TestWorkflowDiamondRunsInDependencyOrder(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	var w workflowView
	s.Must(http.StatusCreated, "POST", "/workflows", diamond("q")).JSON(t, &w)
	if w.Status != "running" || len(w.Steps) != 4 || w.Steps[0].Status != "pending" || w.Steps[3].Status != "blocked" ||
		strings.Join(w.Steps[3].DependsOn, ",") != "b,c" || *w.Name != "diamond" {
		t.Fatalf("submitted: %+v", w)
	}

	var mu sync.Mutex
	var parentsSeen string
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, worker := range []string{"w1", "w2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, p := range s.Poll(worker, []string{"q"}, 1, 200) {
					if p.WorkflowID == nil || *p.WorkflowID != w.ID || p.Step == nil {
						t.Errorf("polled task without its workflow: %+v", p)
					}
					if *p.Step == "d" {
						cur := getWorkflow(t, s, w.ID)
						mu.Lock()
						parentsSeen = string(cur.Steps[1].Result) + string(cur.Steps[2].Result)
						mu.Unlock()
					}
					s.Must(200, "POST", "/workers/ack", map[string]any{"worker_id": worker, "task_id": p.ID,
						"lease_token": p.LeaseToken, "result": map[string]any{"from": *p.Step}})
				}
			}
		}()
	}
	testserver.Eventually(t, 20*time.Second, "workflow succeeded", func() bool {
		return getWorkflow(t, s, w.ID).Status == "succeeded"
	})
	close(stop)
	wg.Wait()

	w = getWorkflow(t, s, w.ID)
	if w.FinishedAt == nil {
		t.Error("succeeded workflow has no finished_at")
	}
	tasks := map[string]testserver.Task{}
	for _, st := range w.Steps {
		if st.Status != "done" || st.Attempts != 1 {
			t.Errorf("step %s: %s after %d attempts", st.Step, st.Status, st.Attempts)
		}
		tasks[st.Step] = s.Task("q", st.TaskID)
		if tk := tasks[st.Step]; tk.WorkflowID == nil || *tk.WorkflowID != w.ID || *tk.Step != st.Step {
			t.Errorf("task of %s does not name its step: %+v", st.Step, tk)
		}
	}
	started := func(step string) time.Time { return tasks[step].AttemptHistory[0].StartedAt }
	finished := func(step string) time.Time { return *tasks[step].AttemptHistory[0].FinishedAt }
	for child, parents := range map[string][]string{"b": {"a"}, "c": {"a"}, "d": {"b", "c"}} {
		for _, p := range parents {
			if started(child).Before(finished(p)) {
				t.Errorf("%s started at %v, before its dependency %s was done at %v", child, started(child), p, finished(p))
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if parentsSeen != `{"from":"b"}{"from":"c"}` {
		t.Errorf("d's worker read its parents' results as %s", parentsSeen)
	}
}

// TestWorkflowValidation: bad submissions get 400 (404 for an unknown queue) and
// create nothing.
func TestWorkflowValidation(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	st := func(name string, deps ...string) map[string]any {
		return map[string]any{"step": name, "queue": "q", "payload": 1, "depends_on": deps}
	}
	for _, tc := range []struct {
		name   string
		body   any
		status int
		code   string
		msg    string
	}{
		{"no steps", map[string]any{"steps": []any{}}, 400, "invalid_request", "1 to 1000 steps"},
		{"duplicate step", map[string]any{"steps": []any{st("a"), st("a")}}, 400, "invalid_request", `duplicate step "a"`},
		{"invalid step name", map[string]any{"steps": []any{st("no spaces")}}, 400, "invalid_request", `step "no spaces" must match`},
		{"unknown dependency", map[string]any{"steps": []any{st("a", "ghost")}}, 400, "invalid_request", `"ghost", which is no step`},
		{"cycle", map[string]any{"steps": []any{st("x"), st("a", "b"), st("b", "c"), st("c", "a")}}, 400, "invalid_request",
			"cycle: a → b → c → a"},
		{"bad priority", map[string]any{"steps": []any{st("a"), map[string]any{"step": "b", "queue": "q", "payload": 1, "priority": 11}}},
			400, "invalid_request", "steps[1]: priority"},
		{"no payload", map[string]any{"steps": []any{map[string]any{"step": "a", "queue": "q"}}}, 400, "invalid_request", "steps[0]: payload"},
		{"unknown field", map[string]any{"steps": []any{st("a")}, "colour": "red"}, 400, "invalid_request", "colour"},
		{"long name", map[string]any{"name": strings.Repeat("n", 201), "steps": []any{st("a")}}, 400, "invalid_request", "name"},
		{"unknown queue", map[string]any{"steps": []any{st("a"), map[string]any{"step": "b", "queue": "nowhere", "payload": 1}}},
			404, "queue_not_found", `"nowhere"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.Do("POST", "/workflows", tc.body)
			var e struct{ Error struct{ Message string } }
			resp.JSON(t, &e)
			if resp.Status != tc.status || resp.ErrorCode(t) != tc.code || !strings.Contains(e.Error.Message, tc.msg) {
				t.Fatalf("%d %s, want %d %s with %q", resp.Status, resp.Body, tc.status, tc.code, tc.msg)
			}
		})
	}
	var list struct {
		Workflows []workflowView `json:"workflows"`
	}
	s.Must(200, "GET", "/workflows", nil).JSON(t, &list)
	if len(list.Workflows) != 0 {
		t.Errorf("bad submissions created %d workflows", len(list.Workflows))
	}
	var tasks struct{ Tasks []testserver.Task }
	s.Must(200, "GET", "/queues/q/tasks", nil).JSON(t, &tasks)
	if len(tasks.Tasks) != 0 {
		t.Errorf("bad submissions created %d tasks", len(tasks.Tasks))
	}
	for _, bad := range []string{"/workflows/not-a-uuid", "/workflows/6f1d7a55-94b4-4f4e-9a63-35a4b5e7a111"} {
		if resp := s.Do("GET", bad, nil); resp.Status != 404 || resp.ErrorCode(t) != "workflow_not_found" {
			t.Errorf("GET %s: %d %s", bad, resp.Status, resp.Body)
		}
	}
	if resp := s.Do("GET", "/workflows?status=bogus", nil); resp.Status != 400 {
		t.Errorf("bad status filter: %d", resp.Status)
	}
}

func TestWorkflowIdempotencyListAndCancel(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	body := diamond("q")
	body["idempotency_key"] = "deploy-42"
	var first, again workflowView
	s.Must(201, "POST", "/workflows", body).JSON(t, &first)
	s.Must(200, "POST", "/workflows", body).JSON(t, &again)
	if again.ID != first.ID || *again.IdempotencyKey != "deploy-42" {
		t.Fatalf("repeat gave %s, want %s", again.ID, first.ID)
	}
	body["name"] = "other"
	if resp := s.Do("POST", "/workflows", body); resp.Status != 409 || resp.ErrorCode(t) != "idempotency_conflict" {
		t.Fatalf("conflict: %d %s", resp.Status, resp.Body)
	}
	var second workflowView
	s.Must(201, "POST", "/workflows", diamond("q")).JSON(t, &second)

	// Newest first, paginated, filtered.
	var page struct {
		Workflows  []workflowView `json:"workflows"`
		NextCursor *string        `json:"next_cursor"`
	}
	s.Must(200, "GET", "/workflows?limit=1", nil).JSON(t, &page)
	if len(page.Workflows) != 1 || page.Workflows[0].ID != second.ID || page.NextCursor == nil || len(page.Workflows[0].Steps) != 4 {
		t.Fatalf("page 1: %+v", page)
	}
	s.Must(200, "GET", "/workflows?limit=1&cursor="+*page.NextCursor, nil).JSON(t, &page)
	if len(page.Workflows) != 1 || page.Workflows[0].ID != first.ID || page.NextCursor != nil {
		t.Fatalf("page 2: %+v", page)
	}

	// Cancel: a is executing (cancel_requested), the rest cancelled.
	p := s.Poll("w", []string{"q"}, 1, 5000)
	if len(p) != 1 {
		t.Fatal("nothing to poll")
	}
	var cancelled workflowView
	s.Must(200, "DELETE", "/workflows/"+*p[0].WorkflowID, nil).JSON(t, &cancelled)
	if cancelled.Status != "cancelled" || cancelled.FinishedAt == nil {
		t.Fatalf("cancelled: %+v", cancelled)
	}
	for _, st := range cancelled.Steps {
		want := "cancelled"
		if st.TaskID == p[0].ID {
			want = "executing"
			if !s.Task("q", st.TaskID).CancelRequested {
				t.Errorf("executing step %s: no cancel_requested", st.Step)
			}
		}
		if st.Status != want {
			t.Errorf("step %s: %s, want %s", st.Step, st.Status, want)
		}
	}
	if hb := s.Heartbeat("w", p[0]).Map(t); hb["cancel_requested"] != true {
		t.Errorf("heartbeat of the executing step: %v", hb)
	}
	if resp := s.Do("DELETE", "/workflows/"+cancelled.ID, nil); resp.Status != 409 || resp.ErrorCode(t) != "workflow_not_cancellable" {
		t.Errorf("second cancel: %d %s", resp.Status, resp.Body)
	}
	s.Must(200, "GET", "/workflows?status=cancelled", nil).JSON(t, &page)
	if len(page.Workflows) != 1 || page.Workflows[0].ID != cancelled.ID {
		t.Errorf("status filter: %+v", page.Workflows)
	}
}

// TestWorkflowDeadStepFailsAndReplayResumes: a dead step cancels the waiting steps,
// flags the executing sibling and fails the workflow; replaying the dead step from
// the DLQ resumes the workflow, and the done step never runs again.
func TestWorkflowDeadStepFailsAndReplayResumes(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"max_retries": 0})
	var w workflowView
	s.Must(201, "POST", "/workflows", diamond("q")).JSON(t, &w)
	pollStep := func() testserver.Polled {
		t.Helper()
		for i := 0; i < 50; i++ {
			if p := s.Poll("w", []string{"q"}, 1, 1000); len(p) == 1 {
				return p[0]
			}
		}
		t.Fatal("nothing to poll")
		return testserver.Polled{}
	}
	a := pollStep()
	s.Ack("w", a)
	b, c := pollStep(), pollStep()
	if *b.Step == "c" {
		b, c = c, b
	}
	s.Nack("w", b, "compiler exploded", map[string]any{"retryable": false})

	w = getWorkflow(t, s, w.ID)
	want := map[string]string{"a": "done", "b": "dead", "c": "executing", "d": "cancelled"}
	for _, st := range w.Steps {
		if st.Status != want[st.Step] {
			t.Errorf("step %s: %s, want %s", st.Step, st.Status, want[st.Step])
		}
	}
	if w.Status != "failed" {
		t.Fatalf("workflow %s, want failed", w.Status)
	}
	if le := w.Steps[w.step("d")].LastError; le == nil || !strings.Contains(*le, "step b") {
		t.Errorf("d's last_error %v does not name b", le)
	}
	if !s.Task("q", c.ID).CancelRequested {
		t.Error("executing sibling c has no cancel_requested")
	}
	s.Nack("w", c, "stopping as asked", nil)
	if got := s.Task("q", c.ID).Status; got != "cancelled" {
		t.Errorf("c after its nack: %s", got)
	}

	var replay testserver.Task
	s.Must(201, "POST", "/queues/q/dlq/"+b.ID+"/replay", nil).JSON(t, &replay)
	if replay.ReplayedFrom == nil || *replay.ReplayedFrom != b.ID || replay.WorkflowID == nil || *replay.Step != "b" {
		t.Fatalf("replay: %+v", replay)
	}
	w = getWorkflow(t, s, w.ID)
	if w.Status != "running" || w.FinishedAt != nil || w.Steps[w.step("b")].TaskID != replay.ID ||
		w.Steps[w.step("a")].TaskID != a.ID || w.Steps[w.step("d")].Status != "blocked" {
		t.Fatalf("resumed: %+v", w)
	}
	if st := s.Task("q", w.Steps[w.step("c")].TaskID); st.ReplayedFrom == nil || *st.ReplayedFrom != c.ID {
		t.Errorf("c's new task does not come from its cancelled one: %+v", st)
	}
	for i := 0; i < 3; i++ {
		p := pollStep()
		if *p.Step == "a" {
			t.Fatal("the done step a ran again")
		}
		s.Ack("w", p)
	}
	testserver.Eventually(t, 5*time.Second, "resumed workflow succeeded", func() bool {
		return getWorkflow(t, s, w.ID).Status == "succeeded"
	})
	if got := s.Task("q", a.ID); got.Attempts != 1 {
		t.Errorf("a ran %d times", got.Attempts)
	}
}

// TestWorkflowBulkCancelOfBlockedSteps: bulk-cancelling a queue's blocked tasks
// cancels their workflows.
func TestWorkflowBulkCancelOfBlockedSteps(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	var w workflowView
	s.Must(201, "POST", "/workflows", diamond("q")).JSON(t, &w)
	var out map[string]any
	s.Must(200, "POST", "/queues/q/tasks/cancel", map[string]any{"status": "blocked"}).JSON(t, &out)
	if out["cancelled"] != float64(3) {
		t.Fatalf("bulk cancel: %v", out)
	}
	w = getWorkflow(t, s, w.ID)
	if w.Status != "cancelled" || w.Steps[0].Status != "cancelled" {
		t.Fatalf("after the bulk cancel: %+v", w)
	}
	var stats map[string]any
	s.Must(200, "GET", "/queues/q/stats", nil).JSON(t, &stats)
	if depth := stats["depth"].(map[string]any); depth["blocked"] != float64(0) || depth["cancelled"] != float64(4) {
		t.Errorf("depth: %v", depth)
	}
}

// BenchmarkWorkflowUnblockLatency measures, over HTTP on one replica, the time from a
// parent's ack leaving the worker to its child reaching a worker waiting in a long
// poll (sent just before the ack), and reports its p50 and p95 (ms). The enqueue case
// is the baseline on the same box: from an enqueue leaving the producer to the task
// reaching a waiting worker.
func BenchmarkWorkflowUnblockLatency(b *testing.B) {
	for _, bc := range []string{"unblock", "enqueue"} {
		b.Run(bc, func(b *testing.B) {
			s := testserver.Start(b, testserver.Options{})
			s.CreateQueue("q", nil)
			var lat []time.Duration
			for b.Loop() {
				var parent []testserver.Polled
				if bc == "unblock" {
					s.Must(201, "POST", "/workflows", map[string]any{"steps": []any{
						map[string]any{"step": "parent", "queue": "q", "payload": 1},
						map[string]any{"step": "child", "queue": "q", "payload": 2, "depends_on": []string{"parent"}},
					}})
					for len(parent) == 0 {
						parent = s.Poll("p", []string{"q"}, 1, 5000)
					}
				}
				got, acked := make(chan time.Time, 1), make(chan struct{})
				go func() {
					defer close(acked)
					for {
						if p := s.Poll("c", []string{"q"}, 1, 10000); len(p) == 1 {
							got <- time.Now()
							s.Ack("c", p[0])
							return
						}
					}
				}()
				start := time.Now()
				if bc == "unblock" {
					if r := s.Ack("p", parent[0]); r.Status != 200 {
						b.Fatalf("ack: %d %s", r.Status, r.Body)
					}
				} else {
					s.Must(201, "POST", "/queues/q/tasks", map[string]any{"payload": 1})
				}
				lat = append(lat, (<-got).Sub(start))
				<-acked // the server must outlive the last ack
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(q(0.5), "p50_ms")
			b.ReportMetric(q(0.95), "p95_ms")
		})
	}
}

// TestWorkflowStepsKeepTheSubmissionsTrace: every step's task carries the trace
// context of POST /workflows, as an enqueue's tasks do.
func TestWorkflowStepsKeepTheSubmissionsTrace(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", nil)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp := testserver.Do(t, s.URL, "POST", "/workflows", map[string]any{"steps": []any{
		map[string]any{"step": "a", "queue": "q", "payload": 1}}}, http.Header{"Traceparent": {tp}})
	if resp.Status != 201 {
		t.Fatalf("submit: %d %s", resp.Status, resp.Body)
	}
	p := s.Poll("w", []string{"q"}, 1, 5000)
	if len(p) != 1 || p[0].Traceparent == nil || !strings.Contains(*p[0].Traceparent, "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Fatalf("polled step: %+v", p)
	}
}
