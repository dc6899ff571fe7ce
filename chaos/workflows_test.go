package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// wfStep is one planned workflow step, as sent in POST /workflows.
type wfStep struct {
	Step       string          `json:"step"`
	Queue      string          `json:"queue"`
	Payload    json.RawMessage `json:"payload"`
	MaxRetries int             `json:"max_retries"`
	DependsOn  []string        `json:"depends_on,omitempty"`
}

// wfSpec is one planned workflow: a diamond or a fan-in whose steps fail and
// recover, sleep past the lease, or (in about one in five) die, and what it must
// end as.
type wfSpec struct {
	Key    string
	Shape  string // diamond, fan-in
	Steps  []wfStep
	Dies   string        // the step planned to exhaust its budget, "" for none
	Expect string        // succeeded or failed (after its resume, for a resumed one)
	At     time.Duration // offset from the start of the run at which it is submitted
	// Resume: the dying step is a push step the target answers 410 until the test
	// replays it from the dead-letter queue, which resumes the failed workflow: it
	// must then end succeeded, without re-running a step done before it failed.
	Resume bool
}

// newWorkflowPlan draws n workflows from seed, spread evenly over window. A diamond
// is a → (b, c) → d; a fan-in is 3–6 parallel steps → join. Steps are fail steps
// that fail 1–2 times then succeed (retried with backoff), sleeps of 100–1500 ms,
// and one in six a sleep of 2.5–3.5 s (longer than the lease, so that worker kills
// and pauses hit steps too). In a fifth of the workflows one non-final step fails
// more often than its budget allows: the workflow must end failed, and no step
// depending on it may ever run. Every second of those (the first included), and one
// in eight of the others, is resumed instead: its dying step is a push step whose
// target answers 410 (it dies at its first attempt) until the test replays it
// (runResumes), and the workflow must end succeeded.
func newWorkflowPlan(seed uint64, n int, window time.Duration) []wfSpec {
	rng := rand.New(rand.NewPCG(seed, 0x77666c77)) // "wflw"
	step := func(name string, deps ...string) wfStep {
		s := wfStep{Step: name, MaxRetries: goodRetries, DependsOn: deps}
		var payload any
		switch r := rng.IntN(6); {
		case r < 3:
			s.Queue, payload = queueFail, map[string]any{"step": name, "fail_times": 1 + rng.IntN(2)}
		case r < 5:
			s.Queue, payload = queueSleep, map[string]any{"step": name, "ms": 100 + rng.IntN(1401)}
		default:
			s.Queue, payload = queueSleep, map[string]any{"step": name, "ms": 2500 + rng.IntN(1001)}
		}
		s.Payload, _ = json.Marshal(payload) // maps of ints and strings always encode
		return s
	}
	// Resumed workflows: every second of the failing ones, and one in eight of the
	// others, drawn from a stream of their own so that the rest of the plan is the
	// same as without them.
	rr := rand.New(rand.NewPCG(seed, 0x72736d65)) // "rsme"
	resumable := func(w *wfSpec) {
		// The step dies after a step it depends on is done, so that the resume has
		// done steps to keep: b or c of a diamond, the join of a fan-in.
		d := &w.Steps[1+rr.IntN(2)]
		if w.Shape == "fan-in" {
			d = &w.Steps[len(w.Steps)-1]
		}
		d.Queue = queuePush
		d.Payload, _ = json.Marshal(map[string]any{"step": d.Step, "gone_until_resumed": w.Key})
		w.Dies, w.Resume, w.Expect = d.Step, true, "succeeded"
	}
	out := make([]wfSpec, n)
	failing := 0
	for i := range out {
		w := wfSpec{Key: fmt.Sprintf("chaos-wf-%d-%d", seed, i), Expect: "succeeded",
			At: time.Duration(int64(window) * int64(i) / int64(max(n, 1)))}
		if rng.IntN(2) == 0 {
			w.Shape = "diamond"
			w.Steps = []wfStep{step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")}
		} else {
			w.Shape = "fan-in"
			var deps []string
			for j := range 3 + rng.IntN(4) {
				s := step(fmt.Sprintf("p%d", j))
				w.Steps = append(w.Steps, s)
				deps = append(deps, s.Step)
			}
			join := step("join", deps...)
			w.Steps = append(w.Steps, join)
		}
		if rng.IntN(5) == 0 {
			// A step with dependents dies: its budget (0 or 1 retries) is smaller than
			// its failures.
			d := &w.Steps[rng.IntN(len(w.Steps)-1)]
			orig := *d
			d.Queue, d.MaxRetries = queueFail, rng.IntN(2)
			d.Payload, _ = json.Marshal(map[string]any{"step": d.Step, "fail_times": d.MaxRetries + 1 + rng.IntN(2)})
			w.Dies, w.Expect = d.Step, "failed"
			if failing%2 == 0 { // resumed instead: that step stays as it was
				*d = orig
				resumable(&w)
			}
			failing++
		} else if rr.IntN(8) == 0 {
			resumable(&w)
		}
		out[i] = w
	}
	return out
}

// wfLedger records what the workflow submitter and the resumer were told.
type wfLedger struct {
	mu       sync.Mutex
	ids      map[string]string // idempotency key → workflow id from a 2xx answer
	failed   int               // calls answered 5xx or cut off (each one retried)
	problems []string          // 4xx answers, calls that never succeeded
	resumes  map[string]wfResume
}

// wfResume is the replay of a failed workflow's dead step, as the resumer made it.
type wfResume struct {
	DeadTask string    // the dead step's task it replayed
	Failed   time.Time // when the resumer saw the workflow failed
	Replay   string    // the new task of a 201; "" when the answer was lost but the replay committed
	Calls    int       // replay requests made
}

// resumeWait bounds how long the resumer waits for a workflow to fail after its
// submission, and then for its replay to be answered.
const resumeWait = 4 * time.Minute

// runResumes resumes each workflow planned so (Resume) as soon as PostgreSQL shows
// it failed, during the fault window or after it: it lets the push target answer
// the dying step 200 from then on and replays the dead step through
// POST /queues/push/dlq/:id/replay, as an operator would.
func (h *harness) runResumes(ctx context.Context, wfs []wfSpec, l *wfLedger) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, w := range wfs {
		if w.Resume {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.resume(ctx, w, l)
			}()
		}
	}
}

func (h *harness) resume(ctx context.Context, w wfSpec, l *wfLedger) {
	problem := func(format string, args ...any) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.problems = append(l.problems, fmt.Sprintf("resume of workflow %s: ", w.Key)+fmt.Sprintf(format, args...))
	}
	wait := func(d time.Duration) bool { // false when the test is ending
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if !wait(time.Until(h.start.Add(w.At))) { // its submission's place in the schedule
		problem("abandoned, the test is ending")
		return
	}
	deadline := h.start.Add(w.At + resumeWait)
	var dead string
	for {
		var status, taskStatus string
		err := h.dbRetry(10*time.Second, func(ctx context.Context) error {
			return h.db.QueryRow(ctx, `SELECT w.status, t.id::text, t.status FROM workflows w
				JOIN workflow_steps ws ON ws.workflow_id = w.id AND ws.step = $2
				JOIN all_tasks t ON t.id = ws.task_id
				WHERE w.idempotency_key = $1`, w.Key, w.Dies).Scan(&status, &dead, &taskStatus)
		})
		if err == nil && status == "failed" && taskStatus == "dead" {
			break
		}
		if err == nil && status != "running" {
			problem("the workflow ended %s (step %s %s) before its resume", status, w.Dies, taskStatus)
			return
		}
		// An error (no step task yet, or an outage outlasting dbRetry's 10 s, as a
		// PostgreSQL restart on a loaded machine can) is looked at again until the
		// deadline: giving up early would leave the workflow failed, unresumed.
		if time.Now().After(deadline) {
			problem("not failed by %s: %s/%s %v", deadline.Format("15:04:05"), status, taskStatus, err)
			return
		}
		if !wait(250 * time.Millisecond) { // the next look at PostgreSQL
			problem("abandoned, the test is ending")
			return
		}
	}
	r := wfResume{DeadTask: dead, Failed: time.Now()}
	h.push.heal(w.Key)
	deadline = time.Now().Add(resumeWait)
	for {
		r.Calls++
		status, data, err := h.call(ctx, http.MethodPost, "/queues/"+queuePush+"/dlq/"+dead+"/replay", nil, nil)
		if err == nil && status == http.StatusCreated {
			var got struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(data, &got); err != nil || got.ID == "" {
				problem("replay answered without an id: %s", data)
			}
			r.Replay = got.ID
			break
		}
		if err == nil && status < 500 {
			problem("replay answered %d: %s", status, data)
			return
		}
		// No answer, or a 5xx: a replay that committed must not be sent again (a
		// second replay of the same dead task would be a plain task).
		var replays int
		if err := h.dbRetry(time.Minute, func(ctx context.Context) error {
			return h.db.QueryRow(ctx, `SELECT replay_count FROM all_tasks WHERE id = $1`, dead).Scan(&replays)
		}); err == nil && replays > 0 {
			break
		}
		if time.Now().After(deadline) {
			problem("replay not answered within %s: %d %v", resumeWait, status, err)
			return
		}
		if !wait(200 * time.Millisecond) { // retry backoff through an outage
			problem("abandoned, the test is ending")
			return
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.resumes == nil {
		l.resumes = map[string]wfResume{}
	}
	l.resumes[w.Key] = r
}

// runWorkflows submits the planned workflows at their offsets, each retried with
// the same idempotency key and body until it gets a 2xx.
func (h *harness) runWorkflows(ctx context.Context, wfs []wfSpec, l *wfLedger) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, w := range wfs {
		timer := time.NewTimer(time.Until(h.start.Add(w.At))) // the workflow's place in the schedule
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.submitWorkflow(ctx, w, l)
		}()
	}
}

func (h *harness) submitWorkflow(ctx context.Context, w wfSpec, l *wfLedger) {
	body := map[string]any{"name": w.Shape + " " + w.Key, "idempotency_key": w.Key, "steps": w.Steps}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		status, data, err := h.call(ctx, http.MethodPost, "/workflows", body, nil)
		if err == nil && (status == http.StatusCreated || status == http.StatusOK) {
			var got struct {
				ID string `json:"id"`
			}
			l.mu.Lock()
			if err := json.Unmarshal(data, &got); err != nil || got.ID == "" {
				l.problems = append(l.problems, fmt.Sprintf("workflow %s: answer without an id: %s", w.Key, data))
			} else if prev, ok := l.ids[w.Key]; ok && prev != got.ID {
				l.problems = append(l.problems, fmt.Sprintf("workflow %s answered %s, earlier %s", w.Key, got.ID, prev))
			} else {
				l.ids[w.Key] = got.ID
			}
			l.mu.Unlock()
			return
		}
		l.mu.Lock()
		switch {
		case err == nil && status < 500:
			l.problems = append(l.problems, fmt.Sprintf("workflow %s: status %d: %s", w.Key, status, data))
		case ctx.Err() != nil:
			l.problems = append(l.problems, fmt.Sprintf("workflow %s: abandoned, the test is ending", w.Key))
		case time.Now().After(deadline):
			l.problems = append(l.problems, fmt.Sprintf("workflow %s: no 2xx within 2 minutes; last: %d %v", w.Key, status, err))
		default:
			l.failed++
			l.mu.Unlock()
			backoff(200 * time.Millisecond)
			continue
		}
		l.mu.Unlock()
		return
	}
}

// dbWorkflow is a workflow row with its steps.
type dbWorkflow struct {
	ID     string
	Status string
	Key    *string
	Steps  map[string]dbStep
}

type dbStep struct {
	DependsOn []string
	TaskID    string
}

func (h *harness) loadWorkflows() map[string]*dbWorkflow {
	out := map[string]*dbWorkflow{}
	err := h.dbRetry(time.Minute, func(ctx context.Context) error {
		clear(out)
		// Workflows retention removed (whole) count as they were when deleted.
		rows, err := h.db.Query(ctx, `SELECT id::text, status, idempotency_key FROM workflows
			UNION ALL SELECT id::text, status, idempotency_key FROM chaos_workflow_gone g
			WHERE NOT EXISTS (SELECT 1 FROM workflows w WHERE w.id = g.id)`)
		if err != nil {
			return err
		}
		var id, status string
		var key *string
		if _, err := pgx.ForEachRow(rows, []any{&id, &status, &key}, func() error {
			out[id] = &dbWorkflow{ID: id, Status: status, Key: key, Steps: map[string]dbStep{}}
			return nil
		}); err != nil {
			return err
		}
		rows, err = h.db.Query(ctx, `SELECT workflow_id::text, step, depends_on, task_id::text FROM workflow_steps
			UNION ALL SELECT workflow_id::text, step, depends_on, task_id::text FROM chaos_step_gone g
			WHERE NOT EXISTS (SELECT 1 FROM workflows w WHERE w.id = g.workflow_id)`)
		if err != nil {
			return err
		}
		var step, task string
		var deps []string
		_, err = pgx.ForEachRow(rows, []any{&id, &step, &deps, &task}, func() error {
			if w := out[id]; w != nil {
				w.Steps[step] = dbStep{DependsOn: append([]string(nil), deps...), TaskID: task}
			}
			return nil
		})
		return err
	})
	if err != nil {
		h.t.Fatalf("read workflows: %v", err)
	}
	return out
}

// verifyWorkflows checks every planned workflow in PostgreSQL: stored once under
// its key, ended as planned (none left running), and no attempt of a step started
// before every one of its dependencies' tasks was done (its succeeded attempt's
// finished_at, on the database clock).
func (h *harness) verifyWorkflows(wfs []wfSpec, l *wfLedger, byID map[string]dbTask, byTask map[string][]dbAttempt, rep *report) {
	stored := h.loadWorkflows()
	byKey := map[string][]*dbWorkflow{}
	for _, w := range stored {
		if w.Key != nil {
			byKey[*w.Key] = append(byKey[*w.Key], w)
		}
	}
	doneAt := func(task string) (time.Time, bool) {
		if byID[task].Status != "done" {
			return time.Time{}, false
		}
		hist := byTask[task]
		if len(hist) == 0 || hist[len(hist)-1].Finished == nil {
			return time.Time{}, false
		}
		return *hist[len(hist)-1].Finished, true
	}
	var notOne, running, wrongEnd, order, resumeBad, rerun []string
	ends := map[string]int{}
	steps, resumed := 0, 0
	ofWorkflow := map[string][]dbTask{} // every task of a workflow, replaced ones included
	for _, t := range byID {
		if t.WorkflowID != nil {
			ofWorkflow[*t.WorkflowID] = append(ofWorkflow[*t.WorkflowID], t)
		}
	}
	for _, spec := range wfs {
		ws := byKey[spec.Key]
		if len(ws) != 1 {
			notOne = append(notOne, fmt.Sprintf("%s → %d workflows", spec.Key, len(ws)))
			continue
		}
		w := ws[0]
		ends[w.Status]++
		if w.Status == "running" {
			running = append(running, fmt.Sprintf("%s (%s)", w.ID, spec.Key))
		} else if w.Status != spec.Expect {
			wrongEnd = append(wrongEnd, fmt.Sprintf("%s %s: %s, want %s (dies: %q)", w.ID, spec.Shape, w.Status, spec.Expect, spec.Dies))
		}
		for name, s := range w.Steps {
			steps++
			hist := byTask[s.TaskID]
			if spec.Expect == "succeeded" && byID[s.TaskID].Status != "done" {
				wrongEnd = append(wrongEnd, fmt.Sprintf("%s step %s: task %s %s in a workflow that must succeed",
					w.ID, name, s.TaskID, byID[s.TaskID].Status))
			}
			for _, dep := range s.DependsOn {
				at, done := doneAt(w.Steps[dep].TaskID)
				for _, a := range hist {
					switch {
					case !done:
						order = append(order, fmt.Sprintf("%s step %s attempt %d started %s; dependency %s never done",
							w.ID, name, a.N, a.Started.Format("15:04:05.000"), dep))
					case a.Started.Before(at):
						order = append(order, fmt.Sprintf("%s step %s attempt %d started %s before dependency %s was done at %s",
							w.ID, name, a.N, a.Started.Format("15:04:05.000"), dep, at.Format("15:04:05.000")))
					}
				}
			}
		}
		if spec.Dies != "" && !spec.Resume {
			if t := byID[w.Steps[spec.Dies].TaskID]; t.Status != "dead" {
				wrongEnd = append(wrongEnd, fmt.Sprintf("%s step %s planned to die: %s", w.ID, spec.Dies, t.Status))
			}
		}
		if spec.Resume {
			resumed++
			bad, reran := checkResume(w, spec, l.resumes[spec.Key], byID, byTask, ofWorkflow[w.ID])
			resumeBad = append(resumeBad, bad...)
			rerun = append(rerun, reran...)
		}
	}
	var missing []string
	for _, spec := range wfs {
		if _, ok := l.ids[spec.Key]; !ok {
			missing = append(missing, spec.Key)
		}
	}
	rep.add("workflows not stored exactly once under their key", len(notOne), notOne)
	rep.add("workflows left running once their steps were terminal", len(running), running)
	rep.add("workflows (or steps) ending other than planned", len(wrongEnd), wrongEnd)
	rep.add("step attempts started before a dependency was done (workflow order)", len(order), order)
	rep.add("workflow submissions without a 2xx answer, or with a 4xx; resumes not made", len(missing)+len(l.problems), append(missing, l.problems...))
	rep.add("resumed workflows whose dead step's replay did not become the step's task", len(resumeBad), resumeBad)
	rep.add("resumed workflows: steps done before the failure that ran again after the resume", len(rerun), rerun)
	rep.info("workflows submitted", len(wfs))
	rep.info("workflow steps", steps)
	rep.info("workflows succeeded", ends["succeeded"])
	rep.info("workflows failed (a planned step died)", ends["failed"])
	rep.info("workflows resumed by replaying their dead step (then to succeed)", resumed)
	rep.info("workflow submissions that failed (5xx or cut off) and were retried", l.failed)
}

// checkResume checks workflow w, planned to be resumed, against what PostgreSQL
// holds: the resumer replayed its dead step, whose replay is the step's task now;
// and no step that was done when the workflow failed ran again: none of the tasks
// the resume replaced was done before the dead step died (the resume only replaces
// steps not done, and a step's old task that ends done after the resume no longer
// counts), and no attempt of a step's task not replaced started after the resume.
// The workflow's end and its order are checked with the others'.
func checkResume(w *dbWorkflow, spec wfSpec, r wfResume, byID map[string]dbTask, byTask map[string][]dbAttempt,
	tasks []dbTask) (bad, rerun []string) {
	if r.DeadTask == "" {
		return []string{fmt.Sprintf("%s (%s): never resumed", w.ID, spec.Key)}, nil
	}
	dead := byID[r.DeadTask]
	replay := byID[w.Steps[spec.Dies].TaskID]
	switch {
	case dead.Status != "dead" || dead.Finished == nil:
		bad = append(bad, fmt.Sprintf("%s step %s: the replayed task %s is %s", w.ID, spec.Dies, r.DeadTask, dead.Status))
		return bad, nil
	case replay.Replayed == nil || *replay.Replayed != r.DeadTask:
		bad = append(bad, fmt.Sprintf("%s step %s: its task %s does not replay the dead %s", w.ID, spec.Dies, replay.ID, r.DeadTask))
		return bad, nil
	case r.Replay != "" && r.Replay != replay.ID:
		bad = append(bad, fmt.Sprintf("%s step %s: the replay answered %s, the step's task is %s", w.ID, spec.Dies, r.Replay, replay.ID))
	}
	diedAt, resumedAt := *dead.Finished, replay.Created // both on the database clock
	replaced := map[string]bool{}
	for _, t := range tasks {
		if t.Replayed != nil {
			replaced[*t.Replayed] = true
		}
	}
	for _, t := range tasks {
		if replaced[t.ID] && t.Status == "done" && t.Finished != nil && t.Finished.Before(diedAt) {
			rerun = append(rerun, fmt.Sprintf("%s step %v: task %s was done at %s, before %s died at %s, and was replaced by the resume",
				w.ID, deref(t.Step), t.ID, t.Finished.Format("15:04:05.000"), spec.Dies, diedAt.Format("15:04:05.000")))
		}
	}
	for name, s := range w.Steps {
		if byID[s.TaskID].Replayed != nil {
			continue // re-created by the resume
		}
		for _, a := range byTask[s.TaskID] {
			if a.Started.After(resumedAt) {
				rerun = append(rerun, fmt.Sprintf("%s step %s: task %s (done before the resume) attempt %d started %s, after the resume at %s",
					w.ID, name, s.TaskID, a.N, a.Started.Format("15:04:05.000"), resumedAt.Format("15:04:05.000")))
			}
		}
	}
	return bad, rerun
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
