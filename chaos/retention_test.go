package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/internal/janitor"
	"github.com/taskforge/taskforge/storage"
)

// Retention during the faults. History leaves three ways, and the run takes all
// three while the schedule's faults strike:
//
//   - in bounded batches, on the database clock: every replica runs its janitor every
//     retentionInterval, and the noop queue keeps its finished tasks (and the fail
//     queue its dead ones) shortRetention, while every other queue keeps done and
//     cancelled ones defaultRetention (serve's --retention) and dead ones forever: what
//     the noop queue lets go first leaves by the row;
//   - whole with its workflow (expired_workflows, or a workflow with a task in a day
//     that leaves);
//   - by the day: a day leaves only once every queue's retention has passed its end,
//     which the database clock will not see during a run, so the test runs a janitor
//     of its own on a Store whose clock (storage.WithClock) it moves a day and a
//     retention ahead once the producer is done (no workflow left to resume), until
//     that janitor has dropped a day of done and of cancelled tasks; then it moves the
//     clock back. Faults keep striking meanwhile (retentionTail).
//
// What left history, and how, is recorded inside PostgreSQL by triggers the test
// installs (installHistoryLog): a copy of every row that enters task_history,
// attempt_history, and of every workflow deleted; a line for every row deleted from
// task_history, with who deleted it (the session's application_name, the statement)
// and when (clock_timestamp). A DROP fires no trigger: the test's janitor records
// every day it detached and the clock it ran at. The verifier (verifyRetention) then
// accounts for every finished task.
const (
	shortRetention    = time.Minute
	defaultRetention  = time.Hour
	retentionInterval = 2 * time.Second
	// testJanitorApp is the application_name of the test's janitor's sessions,
	// which the removal log records: its deletes ran on the shifted clock.
	testJanitorApp = "chaos-janitor"
	// clockLead is how far the test's janitor's clock runs ahead after the jump: a
	// day past today's end, plus the longest retention of done and cancelled tasks.
	clockLead = 24*time.Hour + defaultRetention + time.Minute
	// statementSlack bounds how long after the clock was read a janitor statement
	// may still delete rows (its server-side timeout is 5 s).
	statementSlack = 10 * time.Second
)

// retentionEnv is the replicas' retention settings.
var retentionEnv = []string{
	"TASKFORGE_RETENTION=" + defaultRetention.String(),
	"TASKFORGE_RETENTION_INTERVAL=" + retentionInterval.String(),
}

// queueRetention is the retention each queue sets itself (createQueues); the others
// take serve's defaults.
var queueRetention = map[string]map[string]any{
	queueNoop: {"done_ms": shortRetention.Milliseconds(), "cancelled_ms": shortRetention.Milliseconds(),
		"dead_ms": shortRetention.Milliseconds()},
	queueFail: {"dead_ms": shortRetention.Milliseconds()},
}

// retentionOf is how long queue keeps its tasks of final status status; false: forever.
func retentionOf(queue, status string) (time.Duration, bool) {
	if r, ok := queueRetention[queue]; ok {
		if ms, ok := r[status+"_ms"]; ok {
			return time.Duration(ms.(int64)) * time.Millisecond, true
		}
	}
	if status == "dead" {
		return 0, false
	}
	return defaultRetention, true
}

// horizonOf is the longest retention of status over every queue: a day of it leaves
// whole once that much has passed since its end; false: never.
func horizonOf(status string) (time.Duration, bool) {
	if status == "dead" {
		return 0, false // the queues without a retention of their own keep dead tasks forever
	}
	return defaultRetention, true
}

// historyLogSQL installs the test's record of history (see the comment above). Row
// triggers on a partitioned table are cloned to every partition, including those
// created and attached later.
const historyLogSQL = `
CREATE TABLE chaos_task_shadow (LIKE task_history);
ALTER TABLE chaos_task_shadow ADD COLUMN chaos_in_at timestamptz NOT NULL DEFAULT clock_timestamp();
CREATE UNIQUE INDEX ON chaos_task_shadow (id);
CREATE TABLE chaos_attempt_shadow (LIKE attempt_history);
CREATE UNIQUE INDEX ON chaos_attempt_shadow (task_id, attempt);
CREATE TABLE chaos_history_removed (id uuid, queue text, status text, finished_at timestamptz, workflow_id uuid,
	at timestamptz, xid text, app text, query text);
CREATE TABLE chaos_workflow_gone (LIKE workflows);
ALTER TABLE chaos_workflow_gone ADD COLUMN chaos_xid text, ADD COLUMN chaos_at timestamptz;
CREATE TABLE chaos_step_gone (LIKE workflow_steps);

CREATE FUNCTION chaos_task_in() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM chaos_task_shadow WHERE id = NEW.id;
	INSERT INTO chaos_task_shadow SELECT NEW.*, clock_timestamp();
	RETURN NULL;
END $$;
CREATE FUNCTION chaos_attempt_in() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM chaos_attempt_shadow WHERE task_id = NEW.task_id AND attempt = NEW.attempt;
	INSERT INTO chaos_attempt_shadow SELECT NEW.*;
	RETURN NULL;
END $$;
CREATE FUNCTION chaos_task_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO chaos_history_removed VALUES (OLD.id, OLD.queue, OLD.status, OLD.finished_at, OLD.workflow_id,
		clock_timestamp(), pg_current_xact_id()::text, current_setting('application_name'), left(current_query(), 300));
	RETURN NULL;
END $$;
CREATE FUNCTION chaos_workflow_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO chaos_workflow_gone SELECT OLD.*, pg_current_xact_id()::text, clock_timestamp();
	RETURN NULL;
END $$;
CREATE FUNCTION chaos_step_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO chaos_step_gone SELECT OLD.*;
	RETURN NULL;
END $$;
CREATE TRIGGER chaos_task_in AFTER INSERT ON task_history FOR EACH ROW EXECUTE FUNCTION chaos_task_in();
CREATE TRIGGER chaos_attempt_in AFTER INSERT ON attempt_history FOR EACH ROW EXECUTE FUNCTION chaos_attempt_in();
CREATE TRIGGER chaos_task_out AFTER DELETE ON task_history FOR EACH ROW EXECUTE FUNCTION chaos_task_out();
CREATE TRIGGER chaos_workflow_out AFTER DELETE ON workflows FOR EACH ROW EXECUTE FUNCTION chaos_workflow_out();
CREATE TRIGGER chaos_step_out AFTER DELETE ON workflow_steps FOR EACH ROW EXECUTE FUNCTION chaos_step_out();
`

// installHistoryLog creates the record of history, before any task can finish.
func (h *harness) installHistoryLog() {
	err := h.dbRetry(time.Minute, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, h.db, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, historyLogSQL)
			return err
		})
	})
	if err != nil {
		h.t.Fatalf("install the history log: %v", err)
	}
}

// shiftClock is the test's janitor's clock: the wall clock plus an offset the run
// moves. It remembers every move, so that the verifier knows which clock a removal
// ran on.
type shiftClock struct {
	mu     sync.Mutex
	offset time.Duration
	moves  []clockMove
}

type clockMove struct {
	At     time.Time
	Offset time.Duration
}

func (c *shiftClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *shiftClock) set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset = d
	c.moves = append(c.moves, clockMove{At: time.Now(), Offset: d})
}

// leadAround is the largest offset the clock had at any time from slack before at
// until at: a statement deleting rows at at read the clock in that span.
func (c *shiftClock) leadAround(at time.Time, slack time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lead, current time.Duration
	for _, m := range c.moves {
		switch {
		case !m.At.After(at.Add(-slack)):
			current = m.Offset
		case !m.At.After(at):
			lead = max(lead, m.Offset)
		}
	}
	return max(lead, current)
}

// detachRecord is one day the test's janitor tried to take out of history.
type detachRecord struct {
	Day     storage.HistoryDay
	Clock   time.Time // its clock when it asked
	End     time.Time // wall clock when the call returned
	Outcome string
	Err     error
}

// recordingRetention is the test's janitor's way to the retention statements: the
// Store's own, with every detach and drop recorded.
type recordingRetention struct {
	*storage.Store
	clock *shiftClock

	mu       sync.Mutex
	detaches []detachRecord
	dropped  []storage.HistoryDay
}

func (r *recordingRetention) DetachHistoryDay(ctx context.Context, day storage.HistoryDay, lockTimeout time.Duration) (string, error) {
	at := r.clock.now()
	out, err := r.Store.DetachHistoryDay(ctx, day, lockTimeout)
	r.mu.Lock()
	r.detaches = append(r.detaches, detachRecord{Day: day, Clock: at, End: time.Now(), Outcome: out, Err: err})
	r.mu.Unlock()
	return out, err
}

func (r *recordingRetention) DropDetachedHistory(ctx context.Context, timeout time.Duration) ([]storage.HistoryDay, error) {
	days, err := r.Store.DropDetachedHistory(ctx, timeout)
	r.mu.Lock()
	r.dropped = append(r.dropped, days...)
	r.mu.Unlock()
	return days, err
}

// testJanitor is the janitor the test runs beside the replicas', on the shifted clock.
type testJanitor struct {
	clock *shiftClock
	rec   *recordingRetention
	stop  func()

	mu      sync.Mutex
	sweeps  int
	failed  int
	held    int
	jump    bool // move the clock ahead before the next sweep
	jumped  bool
	back    bool // the clock is back: a day of done and of cancelled tasks was dropped
	dropped map[string]bool
	// droppedAhead signals the first drop of a day of done tasks on the shifted clock.
	droppedAhead chan struct{}
}

// startTestJanitor runs the test's janitor every retentionInterval until the test
// stops it (stopTestJanitor) or ends.
func (h *harness) startTestJanitor() *testJanitor {
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := storage.Connect(ctx, h.dbURL+"&application_name="+testJanitorApp, 4)
	if err != nil {
		cancel()
		h.t.Fatalf("connect the test's janitor: %v", err)
	}
	clock := &shiftClock{}
	store := storage.New(pool, storage.WithClock(clock.now),
		storage.WithRetentionDefaults(storage.DefaultRetention(defaultRetention)))
	tj := &testJanitor{clock: clock, rec: &recordingRetention{Store: store, clock: clock},
		dropped: map[string]bool{}, droppedAhead: make(chan struct{})}
	j := janitor.New(tj.rec, store, janitor.Config{Retention: defaultRetention, Interval: retentionInterval,
		OnSweep: tj.onSweep}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = j.Run(ctx)
	}()
	var once sync.Once
	tj.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			pool.Close()
		})
	}
	h.t.Cleanup(tj.stop)
	return tj
}

// onSweep counts the sweep and moves the clock, between two sweeps: ahead once asked
// to, back once a day of done and of cancelled tasks has left.
func (tj *testJanitor) onSweep(sw janitor.Sweep) {
	tj.mu.Lock()
	defer tj.mu.Unlock()
	tj.sweeps++
	tj.held += sw.History.Held
	if sw.Err != nil {
		tj.failed++
	}
	if tj.jumped && !tj.back {
		for _, d := range sw.History.Dropped {
			if !tj.dropped[d.Status] && d.Status == "done" {
				close(tj.droppedAhead)
			}
			tj.dropped[d.Status] = true
		}
		if tj.dropped["done"] && tj.dropped["cancelled"] {
			tj.clock.set(0)
			tj.back = true
		}
	}
	if tj.jump && !tj.jumped {
		tj.clock.set(clockLead)
		tj.jumped = true
	}
}

// jumpAhead asks for the clock to move clockLead ahead before the next sweep.
func (tj *testJanitor) jumpAhead() {
	tj.mu.Lock()
	defer tj.mu.Unlock()
	tj.jump = true
}

// retentionTail is the faults struck after the producer is done, while the test's
// janitor drops days on its shifted clock: a replica killed in its sweep, Redis
// flushed, PostgreSQL restarted fast and killed (a detach or a drop cut off).
var retentionTail = []fault{
	{Kind: faultReplicaKill, Target: 1, Down: time.Second},
	{Kind: faultPGFast},
	{Kind: faultRedisFlush},
	{Kind: faultPGKill, Down: time.Second},
	{Kind: faultReplicaKill, Target: 2, Down: 500 * time.Millisecond},
}

// shadowTask is a task as it entered history, and what became of it.
type shadowTask struct {
	ID, Queue, Status string
	Attempts          int
	Finished          time.Time
	WorkflowID        *string
	InAt              time.Time
}

type removal struct {
	ID, Queue, Status string
	Finished          time.Time
	WorkflowID        *string
	At                time.Time
	Xid, App, Query   string
}

// isMove reports a row deleted from a default partition only to enter its day's
// new partition (taskforge_ensure_history_partitions).
func (r removal) isMove() bool {
	return strings.Contains(r.Query, "taskforge_ensure_history_partitions")
}

// verifyRetention accounts for every task that entered history: still there, as it
// entered, or removed after its retention age by a retention statement, or in a day
// the test's janitor found expired and detached; none finished in the hot table,
// none in both, none twice; every workflow whole or gone whole.
func (h *harness) verifyRetention(tj *testJanitor, rep *report) retentionFigures {
	tj.stop()
	var (
		shadow                             []shadowTask
		present                            map[string]shadowTask
		removals                           map[string][]removal
		goneWf                             map[string]string     // workflow → xid of its deletion
		liveWorkflowOf                     = map[string]string{} // workflow still stored → its status
		hotFinished, both, twice, orphans  []string
		presentNotShadowed                 []string
		shadowIDs                          = map[string]bool{}
		fig                                retentionFigures
		notWhole, early, unaccounted, diff []string
	)
	err := h.dbRetry(time.Minute, func(ctx context.Context) error {
		tx, err := h.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		shadow, present, removals, goneWf = nil, map[string]shadowTask{}, map[string][]removal{}, map[string]string{}
		hotFinished, both, twice, orphans = nil, nil, nil, nil
		clear(liveWorkflowOf)
		rows, err := tx.Query(ctx, `SELECT id::text, queue, status, attempts, finished_at, workflow_id::text, chaos_in_at
			FROM chaos_task_shadow`)
		if err != nil {
			return err
		}
		if shadow, err = pgx.CollectRows(rows, pgx.RowToStructByPos[shadowTask]); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT id::text, queue, status, attempts, finished_at, workflow_id::text, finished_at
			FROM task_history`)
		if err != nil {
			return err
		}
		hist, err := pgx.CollectRows(rows, pgx.RowToStructByPos[shadowTask])
		if err != nil {
			return err
		}
		for _, t := range hist {
			if _, dup := present[t.ID]; dup {
				twice = append(twice, t.ID)
			}
			present[t.ID] = t
		}
		rows, err = tx.Query(ctx, `SELECT id::text, queue, status, finished_at, workflow_id::text, at, xid, app, query
			FROM chaos_history_removed ORDER BY at`)
		if err != nil {
			return err
		}
		rs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[removal])
		if err != nil {
			return err
		}
		for _, r := range rs {
			removals[r.ID] = append(removals[r.ID], r)
		}
		var id, status string
		rows, err = tx.Query(ctx, `SELECT id::text, chaos_xid FROM chaos_workflow_gone`)
		if err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(rows, []any{&id, &status}, func() error { goneWf[id] = status; return nil }); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT id::text, status FROM workflows`)
		if err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(rows, []any{&id, &status}, func() error { liveWorkflowOf[id] = status; return nil }); err != nil {
			return err
		}
		list := func(dst *[]string, sql string) error {
			rows, err := tx.Query(ctx, sql)
			if err != nil {
				return err
			}
			*dst, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		}
		if err := list(&hotFinished, `SELECT id::text || ' ' || status FROM tasks WHERE status IN ('done', 'cancelled', 'dead')`); err != nil {
			return err
		}
		if err := list(&both, `SELECT t.id::text FROM tasks t JOIN task_history h ON h.id = t.id`); err != nil {
			return err
		}
		return list(&orphans, `SELECT a.task_id::text || ' attempt ' || a.attempt FROM attempt_history a
			WHERE NOT EXISTS (SELECT 1 FROM task_history t WHERE t.id = a.task_id AND t.status = a.task_status)`)
	})
	if err != nil {
		h.t.Fatalf("read history and its log: %v", err)
	}

	tj.rec.mu.Lock()
	detaches := slices.Clone(tj.rec.detaches)
	for _, d := range tj.rec.dropped {
		fig.DaysDropped++
		fig.RowsDropped += d.Rows
	}
	tj.rec.mu.Unlock()
	tj.mu.Lock()
	fig.Sweeps, fig.FailedSweeps, fig.Held, fig.Jumped, fig.Back = tj.sweeps, tj.failed, tj.held, tj.jumped, tj.back
	tj.mu.Unlock()
	for _, d := range detaches {
		if d.Outcome == storage.DayDetached {
			fig.Detached++
		}
	}

	wfTasks := map[string][]shadowTask{}
	for _, s := range shadow {
		shadowIDs[s.ID] = true
		if s.WorkflowID != nil {
			wfTasks[*s.WorkflowID] = append(wfTasks[*s.WorkflowID], s)
		}
	}
	// dayOf is the UTC day of history that holds a task finished at f.
	dayOf := func(f time.Time) time.Time {
		f = f.UTC()
		return time.Date(f.Year(), f.Month(), f.Day(), 0, 0, 0, 0, time.UTC)
	}
	// expired: a task's own retention has passed at clock; or, for a workflow's
	// task, the workflow leaves whole once every task's own retention has passed
	// or once one of its tasks is in a day that every queue's retention has passed.
	expired := func(s shadowTask, clock time.Time) bool {
		if age, kept := retentionOf(s.Queue, s.Status); kept && !s.Finished.Add(age).After(clock) {
			return true
		}
		if s.WorkflowID == nil {
			return false
		}
		all := true
		for _, o := range wfTasks[*s.WorkflowID] {
			if h, ok := horizonOf(o.Status); ok && !dayOf(o.Finished).AddDate(0, 0, 1).Add(h).After(clock) {
				return true
			}
			if age, kept := retentionOf(o.Queue, o.Status); !kept || o.Finished.Add(age).After(clock) {
				all = false
			}
		}
		return all
	}
	for _, s := range shadow {
		if p, ok := present[s.ID]; ok {
			fig.InHistory++
			if p.Status != s.Status || p.Attempts != s.Attempts || !p.Finished.Equal(s.Finished) {
				diff = append(diff, fmt.Sprintf("%s: entered %s with %d attempts at %s, now %s with %d at %s", s.ID,
					s.Status, s.Attempts, s.Finished.Format(time.RFC3339Nano), p.Status, p.Attempts, p.Finished.Format(time.RFC3339Nano)))
			}
			continue
		}
		var last *removal
		for i, r := range removals[s.ID] {
			if !r.isMove() {
				last = &removals[s.ID][i]
			}
		}
		if last != nil {
			// Deleted by a statement: it must be a retention statement, past the age.
			lead := time.Duration(0)
			if last.App == testJanitorApp {
				lead = tj.clock.leadAround(last.At, statementSlack)
			}
			if !expired(s, last.At.Add(lead)) {
				keep := "forever"
				if age, kept := retentionOf(s.Queue, s.Status); kept {
					keep = age.String()
				}
				who := "a replica's janitor"
				if last.App == testJanitorApp {
					who = "the test's janitor"
				} else if last.App != "" {
					who = last.App
				}
				early = append(early, fmt.Sprintf("%s (%s %s, finished %s, kept %s) deleted at %s by %s (clock +%s): %.60q",
					s.ID, s.Queue, s.Status, s.Finished.Format("15:04:05.000"), keep, last.At.Format("15:04:05.000"),
					who, lead, last.Query))
			}
			switch {
			case s.WorkflowID != nil:
				fig.WithWorkflow++
			case last.App == testJanitorApp:
				fig.BatchShifted++
			default:
				fig.BatchReplicas++
			}
			continue
		}
		// No delete: its day's partition was dropped, which only the test's janitor
		// may have asked for, after the task entered it, once the day had expired.
		day := dayOf(s.Finished)
		horizon, expires := horizonOf(s.Status)
		ok := false
		for _, d := range detaches {
			if d.Outcome == storage.DayDetached && d.Day.Status == s.Status && d.Day.Day.Equal(day) && d.End.After(s.InAt) &&
				expires && !d.Day.End().Add(horizon).After(d.Clock) {
				ok = true
				break
			}
		}
		if ok {
			fig.ByDrop++
		} else {
			unaccounted = append(unaccounted, fmt.Sprintf("%s (%s %s, finished %s, entered history %s): gone without a delete or an expired day's drop",
				s.ID, s.Queue, s.Status, s.Finished.Format("15:04:05.000"), s.InAt.Format("15:04:05.000")))
		}
	}
	for id := range present {
		if !shadowIDs[id] {
			presentNotShadowed = append(presentNotShadowed, id)
		}
	}
	// A workflow leaves whole: its row and every task it had, in one transaction.
	for wf, tasks := range wfTasks {
		xid, gone := goneWf[wf]
		if gone {
			fig.WorkflowsGone++
		}
		for _, s := range tasks {
			_, kept := present[s.ID]
			var last *removal
			for i, r := range removals[s.ID] {
				if !r.isMove() {
					last = &removals[s.ID][i]
				}
			}
			switch {
			case gone && kept:
				notWhole = append(notWhole, fmt.Sprintf("workflow %s deleted, its task %s still in history", wf, s.ID))
			case gone && (last == nil || last.Xid != xid):
				notWhole = append(notWhole, fmt.Sprintf("workflow %s deleted, its task %s removed apart from it", wf, s.ID))
			case !gone && !kept:
				notWhole = append(notWhole, fmt.Sprintf("workflow %s (%s) kept, its task %s removed", wf, liveWorkflowOf[wf], s.ID))
			}
		}
	}
	rep.add("tasks removed from history before their retention age", len(early), early)
	rep.add("tasks gone from history without a retention delete or an expired day's drop", len(unaccounted), unaccounted)
	rep.add("history rows that differ from the task as it entered history", len(diff), diff)
	rep.add("tasks in history the history log never saw enter", len(presentNotShadowed), presentNotShadowed)
	rep.add("finished tasks left in the hot table", len(hotFinished), hotFinished)
	rep.add("tasks both in the hot table and in history", len(both), both)
	rep.add("tasks in history twice", len(twice), twice)
	rep.add("attempts in history without their task", len(orphans), orphans)
	rep.add("workflows not kept or removed whole", len(notWhole), notWhole)
	fig.Entered = len(shadow)
	rep.info("tasks that entered history", fig.Entered)
	rep.info("  still in history at the end, as they entered", fig.InHistory)
	rep.info("  removed in batches by the replicas' janitors (database clock)", fig.BatchReplicas)
	rep.info("  removed in batches by the test's janitor (clock moved ahead)", fig.BatchShifted)
	rep.info("  removed whole with their workflow", fig.WithWorkflow)
	rep.info("  removed with their day's partitions", fig.ByDrop)
	rep.info("workflows removed whole", fig.WorkflowsGone)
	rep.info("days of history the test's janitor detached", fig.Detached)
	rep.info("  days it dropped", fig.DaysDropped)
	rep.info("  tasks those drops held", int(fig.RowsDropped))
	rep.info("  expired days held back (a running workflow, a busy lock)", fig.Held)
	rep.info("test's janitor sweeps", fig.Sweeps)
	rep.info("  failed sweeps", fig.FailedSweeps)
	return fig
}

// retentionFigures is what verifyRetention counted.
type retentionFigures struct {
	Entered, InHistory, BatchReplicas, BatchShifted, WithWorkflow, ByDrop int
	WorkflowsGone, Detached, DaysDropped, Held, Sweeps, FailedSweeps      int
	RowsDropped                                                           int64
	Jumped, Back                                                          bool
}

// shadowLoad is the SQL the verifier's load adds to all_tasks and all_attempts: the
// tasks retention removed, as they entered history.
const (
	removedTasksSQL = `SELECT id::text, queue, status, attempts, max_retries, idempotency_key, dispatched_at,
		schedule, workflow_id::text, scheduled_at, created_at, step, replayed_from::text, finished_at, true
		FROM chaos_task_shadow s WHERE NOT EXISTS (SELECT 1 FROM all_tasks a WHERE a.id = s.id)`
	removedAttemptsSQL = `SELECT task_id::text, attempt, worker_id, lease_token::text, status, started_at, finished_at, queue
		FROM chaos_attempt_shadow s WHERE NOT EXISTS (SELECT 1 FROM all_tasks a WHERE a.id = s.task_id)`
)
