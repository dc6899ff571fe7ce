package storage_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// TestEnqueueProbeStaysOnTheDispatchIndex: once ANALYZE has seen one queue's
// backlog and another's dead tasks, the enqueue's probe for due work still reads
// the dispatch indexes (tasks_group_dispatch_idx for the unnamed group,
// tasks_named_dispatch_idx for the named ones), never the whole table (a sequential scan made every enqueue
// of an idle queue cost 80 ms at 40,000 rows and seconds at 2 million), in the plan
// made for each queue and in the generic plan the hot-path pool keeps.
func TestEnqueueProbeStaysOnTheDispatchIndex(t *testing.T) {
	ctx := context.Background()
	store := testenv.NewStore(t)
	for _, q := range []string{"live", "bulk"} {
		if _, err := store.CreateQueue(ctx, storage.Queue{Name: q, MaxRetries: 3}); err != nil {
			t.Fatal(err)
		}
	}
	pool := store.Pool()
	if _, err := pool.Exec(ctx, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at,
			max_retries, attempts, created_at, updated_at, finished_at)
		SELECT gen_random_uuid(), CASE WHEN g % 2 = 0 THEN 'bulk' ELSE 'live' END, '{}', 5,
			CASE WHEN g % 2 = 0 THEN 'pending' ELSE 'dead' END, now() - interval '1 hour', 0,
			g % 2, now() - interval '1 hour', now() - interval '1 hour',
			CASE WHEN g % 2 = 1 THEN now() END
		FROM generate_series(1, 40000) AS g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE tasks"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"live", "bulk"} {
		rows, err := pool.Query(ctx, "EXPLAIN "+storage.EnqueueTasks, q, storage.DueChannel,
			[]string{}, []string{}, []int32{}, []*string{}, []*int32{}, []*int32{}, []*string{}, [][]byte{},
			nil, nil, true, []*string{})
		text := plan(t, rows, err)
		if strings.Contains(text, "Seq Scan on tasks") || !strings.Contains(text, "tasks_group_dispatch_idx") ||
			!strings.Contains(text, "tasks_named_dispatch_idx") {
			t.Errorf("the enqueue's probe of queue %s is not planned on the dispatch indexes:\n%s", q, text)
		}
	}
	// The hot-path pool plans it once, generically (storage.HotPathSettings).
	generic := hotPlans(t, pool)
	if text := generic("enqueue", storage.EnqueueTasks); strings.Contains(text, "Seq Scan on tasks") ||
		!strings.Contains(text, "tasks_group_dispatch_idx") || !strings.Contains(text, "tasks_named_dispatch_idx") {
		t.Errorf("the enqueue's generic plan does not probe the dispatch indexes:\n%s", text)
	}
}

// TestByIDStatementsUseThePrimaryKey: with statistics taken while every task was
// pending, then a thousand tasks buffered and a thousand executing for one worker
// (an idle queue's statistics, then a burst, before autovacuum catches up), the
// statements that take tasks by id still find them through tasks_pkey, never
// through a partial index of their status, which they would read whole for each id.
func TestByIDStatementsUseThePrimaryKey(t *testing.T) {
	_, pool := queueWithRows(t,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries)
			SELECT gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3 FROM generate_series(1, 20000)`,
		`VACUUM ANALYZE tasks`,
		`UPDATE tasks SET status = 'claimed', dispatched_at = now()
			WHERE id IN (SELECT id FROM tasks WHERE status = 'pending' LIMIT 1000)`,
		`UPDATE tasks SET status = 'executing', claimed_by = 'w', lease_token = gen_random_uuid(),
			lease_expires_at = now() + interval '30 seconds', deadline_at = now() + interval '1 hour'
			WHERE id IN (SELECT id FROM tasks WHERE status = 'pending' LIMIT 1000)`)
	// The plan pgx's cached statements get once PostgreSQL settles on a generic one.
	generic := genericPlans(t, pool)
	for name, sql := range storage.ByIDStatements {
		text := generic(name, sql)
		for _, partial := range []string{"tasks_buffered_idx", "tasks_claimed_idx", "tasks_lease_idx"} {
			if strings.Contains(text, partial) {
				t.Errorf("%s takes tasks through %s, not their primary key:\n%s", name, partial, text)
			}
		}
		if !strings.Contains(text, "tasks_pkey") {
			t.Errorf("%s does not use tasks_pkey:\n%s", name, text)
		}
	}
}

// TestByIDStatementsProbeOnStaleStatistics: the hot-path statements that take
// tasks by id read tasks one primary-key probe per id even in a generic plan made
// while the table held 1,600 rows, which a hot-path connection
// (storage.HotPathSettings) keeps as the table grows until a change of tasks'
// indexes' height or an ANALYZE makes it plan again. Such a plan was a sequential
// scan and a hash join for the claim, and a sequential scan for each id for the ack
// (tens of thousands of rows read per call after a burst).
func TestByIDStatementsProbeOnStaleStatistics(t *testing.T) {
	_, pool := queueWithRows(t,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries)
			SELECT gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3 FROM generate_series(1, 1600)`,
		`ANALYZE tasks`)
	hot := hotPlans(t, pool)
	for name, sql := range storage.HotByIDStatements {
		if err := probesByID(hot(name, sql)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestFairDispatchMovesByIDOnStaleStatistics: a fair queue's dispatch runs on the
// hot-path pool too, so its plan is generic and kept. Its heads read the dispatch
// indexes; the update that moves them must probe tasks_pkey per head, not scan tasks
// and hash-join, as its generic plan did on statistics of 1,600 rows before hot-path
// connections turned sequential and bitmap scans off.
func TestFairDispatchMovesByIDOnStaleStatistics(t *testing.T) {
	_, pool := queueWithRows(t,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries)
			SELECT gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3 FROM generate_series(1, 1600)`,
		`ANALYZE tasks`)
	plan := hotPlans(t, pool)("dispatch_due_grouped", storage.DispatchDueGrouped)
	if !strings.Contains(plan, "Index Scan using tasks_pkey on tasks t ") ||
		strings.Contains(plan, "Seq Scan on tasks") || strings.Contains(plan, "Bitmap Heap Scan on tasks") {
		t.Fatalf("the fair dispatch's update does not probe tasks_pkey per head:\n%s", plan)
	}
}

// scanOfTasks is a plan line that reads tasks.
var scanOfTasks = regexp.MustCompile(`(Seq Scan|Index Scan using (\S+)|Index Only Scan using (\S+)|Bitmap Heap Scan|Tid Scan) on tasks\b`)

// probesByID returns an error unless every read of tasks in plan (EXPLAIN's text) is
// a probe of tasks_pkey by id: an index scan of it, or a bitmap scan of it, whose
// index condition is on id.
func probesByID(plan string) error {
	lines := strings.Split(plan, "\n")
	found := false
	for i, line := range lines {
		m := scanOfTasks.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		found = true
		// the node's own lines and its children's: deeper than its arrow
		depth := strings.Index(line, "->")
		var block []string
		for _, l := range lines[i+1:] {
			if d := strings.Index(l, "->"); d >= 0 && d <= depth {
				break
			}
			block = append(block, l)
		}
		body := strings.Join(block, "\n")
		idx := m[2]
		if m[1] == "Bitmap Heap Scan" {
			idx = "?"
			if strings.Contains(body, "Bitmap Index Scan on tasks_pkey") {
				idx = "tasks_pkey"
			}
		}
		if idx != "tasks_pkey" || !strings.Contains(body, "Index Cond: (id = ") {
			return fmt.Errorf("reads tasks other than by a probe of tasks_pkey per id (%s):\n%s", strings.TrimSpace(line), plan)
		}
	}
	if !found {
		return fmt.Errorf("no read of tasks:\n%s", plan)
	}
	return nil
}

// hotPlans is genericPlans on a connection with a hot-path connection's settings
// (storage.HotPathSettings), which the plans of the hot-path statements are made with.
func hotPlans(t *testing.T, pool *pgxpool.Pool) func(name, sql string) string {
	t.Helper()
	return plansWith(t, pool, storage.HotPathSettingsStatement)
}

// genericPlans returns a function that gives the generic plan of a statement (the
// one a connection with plan_cache_mode = force_generic_plan keeps, such as the
// hot-path pool's), on a connection of pool held until the test ends.
func genericPlans(t *testing.T, pool *pgxpool.Pool) func(name, sql string) string {
	t.Helper()
	return plansWith(t, pool, "SET plan_cache_mode = force_generic_plan")
}

// plansWith is genericPlans on a connection that ran settings, which must set
// plan_cache_mode = force_generic_plan.
func plansWith(t *testing.T, pool *pgxpool.Pool, settings string) func(name, sql string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(ctx, settings); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(ctx, "RESET ALL") })
	return func(name, sql string) string {
		t.Helper()
		stmt := "plan_" + strings.ReplaceAll(name, " ", "_")
		desc, err := conn.Conn().Prepare(ctx, stmt, sql)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		nulls := strings.TrimSuffix(strings.Repeat("NULL, ", len(desc.ParamOIDs)), ", ")
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+stmt+"("+nulls+")")
		return plan(t, rows, err)
	}
}

// plan returns the lines of an EXPLAIN's answer as one text.
func plan(t *testing.T, rows pgx.Rows, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestTaskListReadsTheStatusIndex: with no index of a queue's tasks by age alone
// (migration 0014), the unfiltered task list still reads each status's newest
// tasks through tasks_status_list_idx, stopped by its LIMIT, never the whole
// queue, in the plan made for its parameters and in a generic one; and the
// workers list, without tasks_worker_idx, still reads no more than the executing
// tasks.
func TestTaskListReadsTheStatusIndex(t *testing.T) {
	ctx := context.Background()
	store, pool := queueWithRows(t,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, created_at, finished_at)
			SELECT gen_random_uuid(), 'q', '{}', 5, CASE WHEN g % 3 = 0 THEN 'pending' ELSE 'done' END,
				now(), 3, now() - g * interval '1 second', CASE WHEN g % 3 <> 0 THEN now() END
			FROM generate_series(1, 30000) AS g`,
		`ANALYZE tasks`)
	check := func(which, text string) {
		t.Helper()
		if strings.Contains(text, "Seq Scan on tasks") || strings.Contains(text, "Bitmap") ||
			!strings.Contains(text, "Index Scan using tasks_status_list_idx") {
			t.Errorf("the %s plan of the task list does not probe tasks_status_list_idx per status:\n%s", which, text)
		}
	}
	rows, err := pool.Query(ctx, "EXPLAIN "+storage.ListTasks, "q", storage.Statuses, nil, nil, nil, nil, nil, 51)
	check("custom", plan(t, rows, err))
	generic := genericPlans(t, pool)
	check("generic", generic("list", storage.ListTasks))
	// The workers list finds executing tasks without tasks_worker_idx, dropped with
	// tasks_list_idx: through tasks_lease_idx, not the whole table.
	rows, err = pool.Query(ctx, "EXPLAIN "+storage.ListWorkers, 30000)
	if text := plan(t, rows, err); strings.Contains(text, "Seq Scan on tasks") {
		t.Errorf("the workers list reads the whole of tasks:\n%s", text)
	}

	// And it answers: newest first across statuses, page after page.
	var all []uuid.UUID
	f := storage.TaskFilter{Queue: "q", Limit: 700}
	for {
		page, next, err := store.ListTasks(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for i, task := range page {
			all = append(all, task.ID)
			if i > 0 && page[i-1].CreatedAt.Before(task.CreatedAt) {
				t.Fatalf("page out of order at %d: %v before %v", i, page[i-1].CreatedAt, task.CreatedAt)
			}
		}
		if next == nil || len(all) >= 2100 {
			break
		}
		f.After = next
	}
	var want []uuid.UUID
	if err := pgxscan(ctx, pool, &want, `SELECT id FROM all_tasks WHERE queue = 'q' ORDER BY created_at DESC, id DESC LIMIT 2100`); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(all, want) {
		t.Fatalf("three pages of the unfiltered list: %d ids, not the %d newest in order", len(all), len(want))
	}
}

// pgxscan reads a one-column query into dst.
func pgxscan[T any](ctx context.Context, pool *pgxpool.Pool, dst *[]T, sql string) error {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return err
	}
	*dst, err = pgx.CollectRows(rows, pgx.RowTo[T])
	return err
}

// queueWithRows returns a fresh store with one queue "q", and its pool, after
// running stmts on it (the rows and statistics a plan test needs).
func queueWithRows(t *testing.T, stmts ...string) (*storage.Store, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	store := testenv.NewStore(t)
	if _, err := store.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 3}); err != nil {
		t.Fatal(err)
	}
	pool := store.Pool()
	for _, stmt := range stmts {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	return store, pool
}

// TestRepairPageStartsAtItsCursor: the repair pass's page of buffered tasks, in the
// generic plan pgx's cached statement gets, starts its scan of tasks_buffered_idx at
// the cursor (the keyset is an index condition), so a page deep into 20,000 buffered
// tasks reads one page of them, not every task before the cursor; and the pages
// still go through every buffered task once, in order.
func TestRepairPageStartsAtItsCursor(t *testing.T) {
	store, pool := queueWithRows(t,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, dispatched_at)
			SELECT gen_random_uuid(), 'q', '{}', 5, 'claimed', now(), 3,
				now() - interval '1 hour' + g * interval '1 millisecond'
			FROM generate_series(1, 20000) AS g`,
		`VACUUM ANALYZE tasks`)
	text := genericPlans(t, pool)("list buffered", storage.ListBufferedStatement)
	cond := ""
	for line := range strings.Lines(text) {
		if strings.Contains(line, "Index Cond") {
			cond += line
		}
	}
	if !strings.Contains(text, "tasks_buffered_idx") || !strings.Contains(cond, "ROW(dispatched_at, id) >") {
		t.Errorf("the repair page's generic plan does not start tasks_buffered_idx's scan at its cursor:\n%s", text)
	}
	ctx := context.Background()
	var cursor *storage.BufferedCursor
	seen, pages := map[uuid.UUID]bool{}, 0
	var last storage.BufferedTask
	for {
		page, err := store.ListBuffered(ctx, cursor, 0, 3000)
		if err != nil {
			t.Fatal(err)
		}
		for _, bt := range page {
			if seen[bt.ID] || (len(seen) > 0 && !bt.DispatchedAt.After(last.DispatchedAt)) {
				t.Fatalf("page %d: task %s again or out of order", pages, bt.ID)
			}
			seen[bt.ID], last = true, bt
		}
		pages++
		if len(page) < 3000 {
			break
		}
		cursor = &storage.BufferedCursor{DispatchedAt: last.DispatchedAt, ID: last.ID}
	}
	if len(seen) != 20000 || pages != 7 {
		t.Fatalf("%d tasks in %d pages, want 20000 in 7", len(seen), pages)
	}
}

// TestRepairPageKeepsItsIndexOnStaleStatistics: statistics taken while 20,000 tasks
// were pending, then all of them buffered (a dispatch of 100,000 groups' heads, before
// autoanalyze): the planner believes few tasks are claimed, and for the repair page
// chose tasks_claimed_idx and a sort of every buffered task. As ListBuffered plans
// it, the page reads tasks_buffered_idx in order and sorts nothing.
func TestRepairPageKeepsItsIndexOnStaleStatistics(t *testing.T) {
	store, _ := queueWithRows(t,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries)
			SELECT gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3 FROM generate_series(1, 20000)`,
		`VACUUM ANALYZE tasks`,
		`UPDATE tasks SET status = 'claimed', dispatched_at = now() - interval '1 minute'`)
	text, err := store.ExplainListBuffered(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "Sort") || !strings.Contains(text, "tasks_buffered_idx") {
		t.Errorf("the repair page, on statistics from before the dispatch, does not read tasks_buffered_idx in order:\n%s", text)
	}
}
