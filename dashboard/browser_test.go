package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

// Laptop viewport of the browser tests.
const (
	viewWidth  = 1366
	viewHeight = 860
)

// TestBrowser drives the dashboard in headless Chromium against real replicas
// (PostgreSQL and Redis). All subtests share one browser, each in its own tab, on
// its own replica and database.
func TestBrowser(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *env)
		srv  func(*testing.T) *testserver.Instance
	}{
		{"OverviewUpdatesLiveWithoutReload", testOverviewUpdatesLive, nil},
		{"ReplayDeadTaskByClicking", testReplayDeadTask, nil},
		{"PauseQueueFromPage", testPauseQueue, nil},
		{"PauseAndRunScheduleFromPage", testSchedules, nil},
		{"WorkflowGraphLiveAndCancel", testWorkflows, nil},
		{"EditQueueSettings", testEditSettings, nil},
		{"AuditLogListsOperatorActions", testAuditLog, nil},
		{"GroupsBusiestFirstLive", testGroupsBusiestFirstLive, nil},
		{"EditGroupOverrides", testEditGroupOverrides, nil},
		{"InspectorShowsThreeAttempts", testInspectorAttempts, nil},
		{"CancelFromInspector", testCancelFromInspector, nil},
		{"UserStringsRenderInert", testUserStringsRenderInert, nil},
		{"Screenshots", testScreenshots, startFastHeartbeats},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := startReplica
			if tc.srv != nil {
				start = tc.srv
			}
			srv := start(t)
			tc.run(t, &env{t: t, browser: browser, srv: srv})
		})
	}
}

// startReplica runs a replica whose leases (2 minutes) outlast a subtest on a
// loaded machine: a task a subtest holds must still be executing when the page
// shows it, not reclaimed by the watchdog after the test server's default 5 s.
func startReplica(t *testing.T) *testserver.Instance {
	return testserver.Start(t, testserver.Options{Configure: func(c *server.Config) { c.LeaseTimeout = 2 * time.Minute }})
}

// startFastHeartbeats runs a replica whose workers turn stale after 1.5 s but keep
// their leases for two minutes.
func startFastHeartbeats(t *testing.T) *testserver.Instance {
	return testserver.Start(t, testserver.Options{Configure: func(c *server.Config) {
		c.HeartbeatInterval = 500 * time.Millisecond
		c.LeaseTimeout = 2 * time.Minute
	}})
}

// env is what a browser subtest works with: the shared browser and its replica.
type env struct {
	t       *testing.T
	browser context.Context
	srv     *testserver.Instance
}

// open opens a laptop-sized tab on the replica's dashboard at fragment.
func (e *env) open(fragment string) *tab {
	e.t.Helper()
	return openTab(e.t, e.browser, e.srv, fragment, viewWidth, viewHeight)
}

// pollOne polls one task of queue as worker, waiting up to 5 s for it.
func pollOne(t *testing.T, s *testserver.Instance, worker, queue string) testserver.Polled {
	t.Helper()
	got := s.Poll(worker, []string{queue}, 1, 5000)
	if len(got) != 1 {
		t.Fatalf("poll %s as %s: got %d tasks, want 1", queue, worker, len(got))
	}
	return got[0]
}

// makeDead enqueues payload on queue and fails it permanently as worker.
func makeDead(t *testing.T, s *testserver.Instance, queue string, payload any, worker, errText string) testserver.Task {
	t.Helper()
	task := s.Enqueue(queue, map[string]any{"payload": payload})
	p := pollOne(t, s, worker, queue)
	if p.ID != task.ID {
		t.Fatalf("polled %s, want %s", p.ID, task.ID)
	}
	if resp := s.Nack(worker, p, errText, map[string]any{"retryable": false}); resp.Status != http.StatusOK {
		t.Fatalf("nack: %d %s", resp.Status, resp.Body)
	}
	return s.Task(queue, task.ID)
}

// The overview's counts follow an enqueue through the live feed: no reload, and
// no request from the page other than the event stream.
func testOverviewUpdatesLive(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("orders", nil)
	page := e.open("#/overview")
	row := `#queues tr[data-queue="orders"]`
	page.waitJS(fmt.Sprintf(`document.querySelector('%s td[data-col="pending"]')?.textContent === '0'`, row), "the orders row")

	// The keyboard reaches the skip link first; it moves the focus without routing.
	page.do(chromedp.KeyEvent(kb.Tab))
	page.waitJS(`document.activeElement.classList.contains('skip')`, "the skip link focused")
	page.do(chromedp.KeyEvent(kb.Enter))
	page.waitJS(`document.activeElement.id === 'main' && location.hash === '#/overview'`, "the focus on the content")
	page.do(chromedp.Evaluate[chromedp.Void](`window.__sameDocument = true; performance.clearResourceTimings()`))

	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for i := range 3 {
		s.Enqueue("orders", map[string]any{"payload": map[string]any{"order": i}, "scheduled_at": later})
	}
	page.waitJS(fmt.Sprintf(`document.querySelector('%s td[data-col="pending"]').textContent === '3'`, row), "pending = 3 on the page")
	page.waitJS(`document.querySelector('[data-tile="backlog"] .tile-value').textContent === '3'`, "backlog tile = 3")

	if !eval[bool](page, `window.__sameDocument === true`) {
		t.Fatal("the page reloaded")
	}
	requests := eval[[]string](page, `performance.getEntriesByType('resource').filter(e => e.initiatorType === 'fetch' || e.initiatorType === 'xmlhttprequest').map(e => e.name)`)
	if len(requests) > 0 {
		t.Fatalf("the page polled: %v", requests)
	}
	page.screenshot("test-overview-live", false)
	page.checkClean()
}

// A dead task is replayed from the dead-letter browser (confirmed with the
// keyboard); the new task is linked, and the API agrees. Two more are replayed
// in bulk, and one is discarded (after a cancelled first try).
func testReplayDeadTask(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("billing", map[string]any{"max_retries": 0})
	dead := makeDead(t, s, "billing", map[string]any{"invoice": 42}, "worker-1", "card declined")
	more := []testserver.Task{
		makeDead(t, s, "billing", map[string]any{"invoice": 43}, "worker-1", "card declined"),
		makeDead(t, s, "billing", map[string]any{"invoice": 44}, "worker-1", "card declined"),
	}

	page := e.open("#/dlq?queue=billing")
	row := fmt.Sprintf(`#dlq-list tr[data-task="%s"]`, dead.ID)
	page.click(row + ` button[data-action="replay"]`)
	page.waitJS(`document.querySelector('dialog.confirm[open]') !== null`, "the confirmation")
	page.do(chromedp.KeyEvent(kb.Enter)) // the focused button is Replay
	page.waitJS(fmt.Sprintf(`document.querySelector('%s a.new-task') !== null`, row), "the link to the new task")

	href := eval[string](page, fmt.Sprintf(`document.querySelector('%s a.new-task').getAttribute('href')`, row))
	newID := href[strings.LastIndex(href, "=")+1:]
	after := s.Task("billing", dead.ID)
	if after.Status != "dead" || after.ReplayCount != 1 || after.ReplayedAt == nil {
		t.Fatalf("dead task after replay: status %s, replay_count %d", after.Status, after.ReplayCount)
	}
	replayed := s.Task("billing", newID)
	var payload map[string]int
	if err := json.Unmarshal(replayed.Payload, &payload); err != nil || payload["invoice"] != 42 ||
		replayed.ReplayedFrom == nil || *replayed.ReplayedFrom != dead.ID {
		t.Fatalf("new task %s: replayed_from %v, payload %s", newID, replayed.ReplayedFrom, replayed.Payload)
	}
	if got := page.text(row + " td.replays .replay-count"); got != "1×" {
		t.Fatalf("replay count shown %q, want 1×", got)
	}

	// Bulk: the two others, selected and replayed together; then one discarded.
	for _, d := range more {
		page.click(fmt.Sprintf(`#dlq-list tr[data-task="%s"] input[type="checkbox"]`, d.ID))
	}
	page.waitJS(`document.getElementById('replay-selected').textContent === 'Replay selected (2)'`, "two selected")
	page.click("#replay-selected")
	page.click(`dialog.confirm[open] button[value="ok"]`)
	page.waitJS(fmt.Sprintf(`document.querySelectorAll('#dlq-list tr[data-task="%s"] a.new-task, #dlq-list tr[data-task="%s"] a.new-task').length === 2`, more[0].ID, more[1].ID), "links to both new tasks")
	for _, d := range more {
		if got := s.Task("billing", d.ID); got.ReplayCount != 1 {
			t.Errorf("bulk-replayed %s: replay_count %d", d.ID, got.ReplayCount)
		}
	}
	page.click(fmt.Sprintf(`#dlq-list tr[data-task="%s"] button[data-action="discard"]`, more[1].ID))
	page.do(chromedp.KeyEvent(kb.Escape)) // the focus starts on Cancel; Escape cancels too
	page.waitJS(`document.querySelector('dialog.confirm') === null`, "the dialog closed")
	if r := s.Do("GET", "/queues/billing/tasks/"+more[1].ID, nil); r.Status != http.StatusOK {
		t.Fatalf("a cancelled discard discarded: %d", r.Status)
	}
	page.click(fmt.Sprintf(`#dlq-list tr[data-task="%s"] button[data-action="discard"]`, more[1].ID))
	page.click(`dialog.confirm[open] button[value="ok"]`)
	page.waitJS(fmt.Sprintf(`document.querySelector('#dlq-list tr[data-task="%s"]') === null`, more[1].ID), "the row gone")
	if r := s.Do("GET", "/queues/billing/tasks/"+more[1].ID, nil); r.Status != http.StatusNotFound {
		t.Fatalf("discarded task still there: %d", r.Status)
	}

	// The link opens the new task in the inspector.
	page.click(row + " a.new-task")
	page.waitJS(fmt.Sprintf(`document.getElementById('detail-id')?.textContent === %q`, newID), "the new task in the inspector")
	page.screenshot("test-replayed", false)
	// Back in the dead-letter browser, bulk discard: the first and the remaining
	// bulk-replayed one, selected together.
	eval[string](page, `location.hash = '#/dlq?queue=billing'`)
	page.waitJS(fmt.Sprintf(`document.querySelector('%s input[type="checkbox"]') !== null`, row), "the dead-letter list again")
	for _, id := range []string{dead.ID, more[0].ID} {
		page.click(fmt.Sprintf(`#dlq-list tr[data-task="%s"] input[type="checkbox"]`, id))
	}
	page.waitJS(`document.getElementById('discard-selected').textContent === 'Discard selected (2)'`, "two selected to discard")
	page.click("#discard-selected")
	page.click(`dialog.confirm[open] button[value="ok"]`)
	page.waitJS(`document.querySelectorAll('#dlq-list tbody tr').length === 0`, "the discarded rows gone")
	for _, id := range []string{dead.ID, more[0].ID} {
		if r := s.Do("GET", "/queues/billing/tasks/"+id, nil); r.Status != http.StatusNotFound {
			t.Fatalf("bulk-discarded task %s still there: %d", id, r.Status)
		}
	}

	page.checkClean()
}

// A queue is paused with one key press on the overview's Pause button; the API
// reports it paused and the page shows it.
func testPauseQueue(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("emails", nil)
	page := e.open("#/overview")
	button := `#queues tr[data-queue="emails"] button[data-action="pause"]`
	page.do(chromedp.WaitVisible(chromedp.CSS(button)), chromedp.Focus(chromedp.CSS(button)), chromedp.KeyEvent(kb.Enter)) // by keyboard

	testserver.Eventually(t, 5*time.Second, "the API to report emails paused", func() bool {
		var q struct {
			Paused bool `json:"paused"`
		}
		s.Must(http.StatusOK, "GET", "/queues/emails", nil).JSON(t, &q)
		return q.Paused
	})
	page.waitJS(`document.querySelector('#queues tr[data-queue="emails"] td[data-col="state"]').textContent === 'paused'`, "the paused badge")
	page.waitJS(`document.querySelector('#queues tr[data-queue="emails"] button.btn').textContent === 'Resume'`, "the Resume button")
	page.checkClean()
}

// The Schedules tab lists a schedule; Pause reaches the API and Run now enqueues a
// task that the row then links to.
func testSchedules(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("reports", nil)
	s.Must(http.StatusCreated, "POST", "/schedules", map[string]any{
		"name": "nightly", "queue": "reports", "cron": "30 2 * * *", "timezone": "Europe/Berlin", "payload": 1})
	page := e.open("#/schedules")
	row := `#schedule-list tr[data-schedule="nightly"]`
	page.waitJS(fmt.Sprintf(`document.querySelector('%s td[data-col="state"]')?.textContent === 'active'`, row), "the nightly row")
	page.click(row + ` button[data-action="pause"]`)
	testserver.Eventually(t, 5*time.Second, "the API to report nightly paused", func() bool {
		var sch struct {
			Paused bool `json:"paused"`
		}
		s.Must(http.StatusOK, "GET", "/schedules/nightly", nil).JSON(t, &sch)
		return sch.Paused
	})
	page.waitJS(fmt.Sprintf(`document.querySelector('%s td[data-col="state"]')?.textContent === 'paused'`, row), "the paused badge")
	page.click(row + ` button[data-action="run"]`)
	var sch struct {
		LastTaskID *string `json:"last_task_id"`
	}
	testserver.Eventually(t, 5*time.Second, "a task run from the page", func() bool {
		s.Must(http.StatusOK, "GET", "/schedules/nightly", nil).JSON(t, &sch)
		return sch.LastTaskID != nil
	})
	page.waitJS(fmt.Sprintf(`document.querySelector('%s td[data-col="task"] a')?.title === %q`, row, *sch.LastTaskID), "the last task's link")
	page.checkClean()
}

// The Workflows tab lists a workflow and draws it as a graph, one node per step
// coloured by its status, updated without a reload as steps finish; a node links to
// its task, and Cancel reaches the API.
func testWorkflows(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("ci", nil)
	st := func(name string, deps ...string) map[string]any {
		return map[string]any{"step": name, "queue": "ci", "payload": map[string]any{"step": name}, "depends_on": deps}
	}
	var wf struct{ ID string }
	s.Must(http.StatusCreated, "POST", "/workflows", map[string]any{"name": "ci 4f2a9c1", "steps": []any{
		st("build"), st("test", "build"), st("lint", "build"), st("deploy", "test", "lint")}}).JSON(t, &wf)
	page := e.open("#/workflows")
	row := fmt.Sprintf(`#workflow-list tr[data-workflow="%s"]`, wf.ID)
	page.waitJS(fmt.Sprintf(`document.querySelector('%s td[data-col="done"]')?.textContent === '0/4'`, row), "the workflow's row")
	page.click(row + " a")
	page.waitJS(`location.hash.includes('id=')`, "the workflow's page")
	node := func(step string) string { return fmt.Sprintf(`#wf-graph g.wf-node[data-step="%s"]`, step) }
	// build waits in the buffer (claimed) or not yet (pending); deploy is blocked.
	page.waitJS(fmt.Sprintf(`document.querySelectorAll('#wf-graph g.wf-node').length === 4 &&
		/s-(pending|claimed)/.test(document.querySelector('%s').getAttribute('class')) &&
		document.querySelector('%s').classList.contains('s-blocked')`, node("build"), node("deploy")), "the graph")
	// deploy is drawn in the third column, right of test and lint.
	x := func(step string) float64 {
		return eval[float64](page, fmt.Sprintf(`document.querySelector('%s').getBoundingClientRect().x`, node(step)))
	}
	if !(x("build") < x("test") && x("test") == x("lint") && x("lint") < x("deploy")) {
		t.Errorf("layers: build %v, test %v, lint %v, deploy %v", x("build"), x("test"), x("lint"), x("deploy"))
	}
	p := pollOne(t, s, "w1", "ci")
	s.Ack("w1", p)
	page.waitJS(fmt.Sprintf(`document.querySelector('%s')?.classList.contains('s-done') &&
		/s-(pending|claimed)/.test(document.querySelector('%s')?.getAttribute('class'))`, node("build"), node("test")), "build done, test unblocked")
	if id := eval[string](page, `document.querySelector('#workflow-steps tr[data-step="build"] a.chip').title`); id != p.ID {
		t.Errorf("build's task link names %s, want %s", id, p.ID)
	}
	page.screenshot("workflows", true)
	page.click("#workflow-cancel")
	page.waitJS(`document.querySelector('dialog.confirm[open]') !== null`, "the confirmation")
	page.click(`dialog.confirm[open] button[value="ok"]`)
	testserver.Eventually(t, 5*time.Second, "the API to report the workflow cancelled", func() bool {
		var got struct{ Status string }
		s.Must(http.StatusOK, "GET", "/workflows/"+wf.ID, nil).JSON(t, &got)
		return got.Status == "cancelled"
	})
	page.waitJS(fmt.Sprintf(`document.querySelector('%s')?.classList.contains('s-cancelled')`, node("deploy")), "deploy cancelled")
	page.click(node("build"))
	page.waitJS(fmt.Sprintf(`location.hash.includes('task=%s')`, p.ID), "the build node to open its task")
	page.checkClean()
}

// Settings saved from the page reach the API; only the fields changed are sent,
// and an invalid value shows the API's message.
func testEditSettings(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("imports", map[string]any{"max_retries": 7})
	page := e.open("#/settings?queue=imports")
	page.waitJS(`document.getElementById('s-max_retries')?.value === '7'`, "the form")
	// The history card: each status's day partitions and the janitor's last run.
	page.waitJS(`['Kept done', 'Kept dead', 'Janitor last ran'].every((s) =>
		document.getElementById('history-state')?.textContent.includes(s))`, "the history card")
	page.enter("#s-rate_limit", "25")
	page.enter("#s-rate_burst", "5")
	page.click("#save-settings")
	testserver.Eventually(t, 5*time.Second, "the new rate limit", func() bool {
		var q struct {
			RateLimit  *float64 `json:"rate_limit"`
			RateBurst  *int     `json:"rate_burst"`
			MaxRetries int      `json:"max_retries"`
		}
		s.Must(http.StatusOK, "GET", "/queues/imports", nil).JSON(t, &q)
		return q.RateLimit != nil && *q.RateLimit == 25 && q.RateBurst != nil && *q.RateBurst == 5 && q.MaxRetries == 7
	})
	// The page has taken the save's answer (the API can be seen to change first).
	page.waitJS(`document.getElementById('settings-state').textContent === 'Saved values shown' &&
		!document.getElementById('save-settings').disabled`, "the page to take the save's answer")
	// Retention shows in hours (empty: forever) and is saved in milliseconds; only the
	// age changed is sent, so the others keep following the server's defaults.
	page.waitJS(`document.getElementById('s-retention_done')?.value === '168' &&
		document.getElementById('s-retention_dead').value === ''`, "the retention in hours")
	page.enter("#s-retention_done", "2")
	page.click("#save-settings")
	testserver.Eventually(t, 5*time.Second, "the new retention", func() bool {
		var q struct {
			Retention struct {
				DoneMs      *int64 `json:"done_ms"`
				CancelledMs *int64 `json:"cancelled_ms"`
				DeadMs      *int64 `json:"dead_ms"`
			} `json:"retention"`
		}
		s.Must(http.StatusOK, "GET", "/queues/imports", nil).JSON(t, &q)
		r := q.Retention
		return r.DoneMs != nil && *r.DoneMs == 2*3600*1000 && r.CancelledMs != nil && *r.CancelledMs == 7*24*3600*1000 && r.DeadMs == nil
	})
	page.waitJS(`document.getElementById('settings-state').textContent === 'Saved values shown' &&
		!document.getElementById('save-settings').disabled`, "the page to take the save's answer")
	// Fairness and the groups' defaults: a select and numbers, sent as they are.
	page.enter("#s-fairness", "round_robin")
	page.enter("#s-group_max_concurrency", "3")
	page.click("#save-settings")
	testserver.Eventually(t, 5*time.Second, "the fairness", func() bool {
		var q struct {
			Fairness            *string `json:"fairness"`
			GroupMaxConcurrency *int    `json:"group_max_concurrency"`
		}
		s.Must(http.StatusOK, "GET", "/queues/imports", nil).JSON(t, &q)
		return q.Fairness != nil && *q.Fairness == "round_robin" && q.GroupMaxConcurrency != nil && *q.GroupMaxConcurrency == 3
	})
	page.waitJS(`document.getElementById('settings-state').textContent === 'Saved values shown' &&
		!document.getElementById('save-settings').disabled`, "the page to take the save's answer")
	page.enter("#s-max_retries", "500")
	page.click("#save-settings")
	page.waitJS(`document.querySelector('#settings-form .error-box')?.textContent.includes('max_retries must be an integer from 0 to 100')`, "the API's message")
	page.checkClean("status of 400") // the refused PATCH
}

// The audit log lists the operator actions made through the API, newest first,
// with their status (a refused PATCH too); the queue filter narrows it to one
// queue, and an action made while the page is open appears without a click. A
// hostile queue name and request body render as text.
func testAuditLog(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("imports", map[string]any{"max_retries": 7})
	s.CreateQueue("exports", nil)
	s.Must(http.StatusOK, "PATCH", "/queues/imports", map[string]any{"rate_limit": 25})
	if r := s.Do("PATCH", "/queues/imports", map[string]any{"max_retries": 500}); r.Status != http.StatusBadRequest {
		t.Fatalf("PATCH max_retries 500: %d %s", r.Status, r.Body)
	}
	// An invalid queue name is refused, and recorded with the name as its queue.
	if r := s.Do("POST", "/queues", map[string]any{"name": evilHTML, "max_retries": 1}); r.Status != http.StatusBadRequest {
		t.Fatalf("POST /queues with a hostile name: %d %s", r.Status, r.Body)
	}

	page := e.open("#/audit")
	rows := `[...document.querySelectorAll('#audit-list tbody tr')]`
	cells := rows + `.map(tr => ['action', 'queue', 'status'].map(c => tr.querySelector('td[data-col="' + c + '"]').textContent).join(' | '))`
	page.waitJS(rows+`.length === 5`, "five audit entries")
	got := eval[[]string](page, cells)
	want := []string{
		"created queuePOST /queues | " + evilHTML + " | 400",
		"changed settingsPATCH /queues/:name | imports | 400",
		"changed settingsPATCH /queues/:name | imports | 200",
		"created queuePOST /queues | exports | 201",
		"created queuePOST /queues | imports | 201",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := page.text(`#audit-list tbody tr td[data-col="actor"]`); got != "anonymous open" {
		t.Errorf("actor shown %q, want %q", got, "anonymous open")
	}
	classes := eval[[]string](page, rows+`.map(tr => tr.querySelector('td[data-col="status"] .badge').className)`)
	for i, want := range []string{"st-retry", "st-retry", "st-done", "st-done", "st-done"} {
		if !strings.Contains(classes[i], want) {
			t.Errorf("row %d: status badge %q, want %s", i, classes[i], want)
		}
	}
	// The long request is cut short, whole in its title and expanded on a click.
	summary := eval[[]string](page, `(s => [s.textContent, s.title])(document.querySelector('#audit-list tbody tr td[data-col="request"] summary'))`)
	if !strings.HasSuffix(summary[0], "…") || !contains(summary[1], `"name":`+mustJSON(evilHTML)) || !contains(summary[1], `"max_retries":1`) {
		t.Errorf("request shown %q, title %q", summary[0], summary[1])
	}
	page.click(`#audit-list tbody tr td[data-col="request"] summary`)
	page.waitJS(`document.querySelector('#audit-list tbody tr td[data-col="request"] details[open] pre.json') !== null`, "the request expanded")
	if got := page.text(`#audit-list tbody tr td[data-col="request"] pre.json`); !contains(got, mustJSON(evilHTML)) {
		t.Errorf("expanded request %q lacks the name", got)
	}
	page.assertInert("#/audit")

	// The queue filter: only the actions on imports.
	page.enter("#a-queue", "imports")
	page.waitJS(`location.hash === '#/audit?queue=imports' && `+rows+`.length === 3 && `+rows+`.every(tr => tr.querySelector('td[data-col="queue"]').textContent === 'imports')`, "the three entries of imports")
	if got := page.text(`#audit-list tbody tr td[data-col="queue"] a`); got != "imports" {
		t.Errorf("queue link %q", got)
	}
	if href := eval[string](page, `document.querySelector('#audit-list tbody tr td[data-col="queue"] a').getAttribute('href')`); href != "#/settings?queue=imports" {
		t.Errorf("queue link to %s", href)
	}

	// An action made now shows up at the top by itself.
	s.Must(http.StatusOK, "PATCH", "/queues/imports", map[string]any{"paused": true})
	page.waitJS(rows+`.length === 4 && document.querySelector('#audit-list tbody tr td[data-col="action"]').textContent === 'paused queuePATCH /queues/:name'`, "the pause at the top")
	page.click("#audit-refresh")
	page.waitJS(rows+`.length === 4 && !document.getElementById('audit-refresh').disabled`, "the refreshed list")
	page.screenshot("test-audit", false)
	page.checkClean()
}

// The inspector shows a task's three attempts as a timeline: two failures on
// different workers with their errors, then the success, and the result.
func testInspectorAttempts(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("reports", map[string]any{"max_retries": 2})
	task := s.Enqueue("reports", map[string]any{"payload": json.RawMessage(`{"report": "weekly", "big": 12345678901234567890}`)})
	for i, worker := range []string{"worker-a", "worker-b", "worker-c"} {
		p := pollOne(t, s, worker, "reports")
		if p.Attempt != i+1 {
			t.Fatalf("attempt %d, want %d", p.Attempt, i+1)
		}
		var resp testserver.Response
		if i < 2 {
			resp = s.Nack(worker, p, fmt.Sprintf("timeout talking to storage (try %d)", i+1), map[string]any{"retry_after_ms": 0})
		} else {
			// The last attempt reports progress; the inspector shows it after the ack.
			if hb := s.Do("POST", "/workers/heartbeat", map[string]any{"worker_id": worker, "task_id": p.ID,
				"lease_token": p.LeaseToken, "progress": map[string]any{"step": "merge", "pct": 90}}); hb.Status != http.StatusOK {
				t.Fatalf("heartbeat with progress: %d %s", hb.Status, hb.Body)
			}
			resp = s.Do("POST", "/workers/ack", map[string]any{"worker_id": worker, "task_id": p.ID,
				"lease_token": p.LeaseToken, "result": map[string]any{"rows": 1024}})
		}
		if resp.Status != http.StatusOK {
			t.Fatalf("attempt %d: %d %s", i+1, resp.Status, resp.Body)
		}
	}
	// 30 more tasks, for paging.
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for i := range 30 {
		s.Enqueue("reports", map[string]any{"payload": map[string]any{"n": i}, "scheduled_at": later})
	}

	page := e.open(fmt.Sprintf("#/tasks?queue=reports&task=%s", task.ID))
	page.waitJS(`document.querySelectorAll('#attempts li').length === 3`, "three attempts")
	got := eval[[]string](page, `[...document.querySelectorAll('#attempts li')].map(li => li.dataset.status + ' ' + li.querySelector('.tl-worker').textContent + ' ' + (li.querySelector('.tl-error')?.textContent || '-'))`)
	want := []string{
		"failed worker-a timeout talking to storage (try 1)",
		"failed worker-b timeout talking to storage (try 2)",
		"succeeded worker-c -",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("attempt timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	detail := page.text("#task-detail")
	for _, s := range []string{`"report": "weekly"`, `"big": 12345678901234567890`, `"rows": 1024`, "3 of at most 3",
		"Progress (of the last attempt)", `"step": "merge"`} {
		if !strings.Contains(detail, s) {
			t.Errorf("task detail lacks %q", s)
		}
	}
	page.screenshot("test-inspector-attempts", false)

	// Paging: 25 of the 31 tasks, then the rest.
	page.do(chromedp.Navigate(s.URL + "/admin/#/tasks?queue=reports&limit=25"))
	page.waitJS(`document.querySelectorAll('#task-list tbody tr').length === 25`, "the first page of 25")
	page.click("#load-more")
	page.waitJS(`document.querySelectorAll('#task-list tbody tr').length === 31 && document.getElementById('load-more').hidden`, "all 31 tasks")

	// Filters: status and worker.
	page.enter("#f-status", "done")
	page.enter("#f-worker", "worker-c")
	page.click(`#task-filters button[type="submit"]`)
	page.waitJS(fmt.Sprintf(`(() => { const rows = document.querySelectorAll('#task-list tbody tr'); return rows.length === 1 && rows[0].dataset.task === %q })()`, task.ID), "only the done task of worker-c")
	page.checkClean()
}

// A pending task is cancelled from the inspector after a confirmation.
func testCancelFromInspector(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("cleanup", nil)
	task := s.Enqueue("cleanup", map[string]any{"payload": "sweep", "scheduled_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	page := e.open(fmt.Sprintf("#/tasks?queue=cleanup&task=%s", task.ID))
	page.click("#cancel-task")
	page.waitJS(`document.querySelector('dialog.confirm[open]') !== null`, "the confirmation")
	page.click(`dialog.confirm button[value="ok"]`)
	testserver.Eventually(t, 5*time.Second, "the task to be cancelled", func() bool {
		return s.Task("cleanup", task.ID).Status == "cancelled"
	})
	page.waitJS(`document.querySelector('#task-detail .detail-status')?.textContent.includes('cancelled')`, "the cancelled badge")

	// Two more, selected in the list and cancelled in one request; the finished one
	// cannot be selected.
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	more := []testserver.Task{s.Enqueue("cleanup", map[string]any{"payload": 1, "scheduled_at": later}),
		s.Enqueue("cleanup", map[string]any{"payload": 2, "scheduled_at": later})}
	page.do(chromedp.Navigate(s.URL + "/admin/#/tasks?queue=cleanup&limit=25"))
	page.waitJS(`document.querySelectorAll('#task-list tbody tr').length === 3`, "three tasks listed")
	if !eval[bool](page, fmt.Sprintf(`document.querySelector('#task-list tr[data-task="%s"] input[type="checkbox"]').disabled`, task.ID)) {
		t.Fatal("a cancelled task can be selected for cancelling")
	}
	page.click("#tasks-all")
	page.waitJS(`document.getElementById('cancel-selected').textContent === 'Cancel selected (2)'`, "two selected")
	page.click("#cancel-selected")
	page.click(`dialog.confirm[open] button[value="ok"]`)
	for _, m := range more {
		testserver.Eventually(t, 5*time.Second, "the selected tasks to be cancelled", func() bool {
			return s.Task("cleanup", m.ID).Status == "cancelled"
		})
	}
	page.waitJS(`document.querySelectorAll('#task-list tbody input[type="checkbox"]:not(:disabled)').length === 0`, "no cancellable task left in the list")
	page.checkClean()
}
