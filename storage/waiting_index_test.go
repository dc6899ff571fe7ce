package storage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/storage"
)

// TestWaitingTaskIndexEntries: a waiting task of the unnamed group is in three
// indexes of tasks (its key, tasks_group_dispatch_idx, tasks_status_list_idx), one of
// a named group in four (and tasks_named_dispatch_idx), not five as before migration
// 0032: what an enqueue and a dispatch pay per task. The counts are the indexes'
// own, as ANALYZE of the whole table records them.
func TestWaitingTaskIndexEntries(t *testing.T) {
	_, pool := queueWithRows(t,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, group_key)
			SELECT gen_random_uuid(), 'q', '{}', 1 + g % 10, CASE WHEN g % 3 = 0 THEN 'retry' ELSE 'pending' END,
				now() - interval '1 minute', 3, CASE WHEN g % 4 = 0 THEN 'g' || g % 7 END
			FROM generate_series(1, 2000) AS g`,
		`ANALYZE tasks`)
	rows, err := pool.Query(context.Background(), `SELECT c.relname, c.reltuples::int8 FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'tasks'::regclass AND c.reltuples > 0`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	var name string
	var n, total int64
	for rows.Next() {
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		got[name], total = n, total+n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// 1,500 unnamed tasks at 3 entries, 500 named ones at 4.
	want := map[string]int64{"tasks_pkey": 2000, "tasks_status_list_idx": 2000,
		"tasks_group_dispatch_idx": 2000, "tasks_named_dispatch_idx": 500}
	if total != 1500*3+500*4 || len(got) != len(want) {
		t.Fatalf("2,000 waiting tasks (500 of named groups) hold %d index entries, want %d: %v", total, 1500*3+500*4, got)
	}
	for idx, n := range want {
		if got[idx] != n {
			t.Errorf("%s holds %d entries, want %d", idx, got[idx], n)
		}
	}
}

// TestWaitingHeadsReadNoBacklog: the statements that look for a queue's due heads
// (the plain dispatch, the enqueue's probe for due work, the sweep, the oldest age,
// a bulk cancel's pruning read) read a few rows per priority level of tasks, never a
// queue's backlog, in a plain queue of 30,000 waiting tasks, in a fair queue of 2,000
// groups and an unnamed group, and in a queue without fairness whose tasks have
// groups (whose dispatch keeps one line across them). Each is run (EXPLAIN ANALYZE,
// rolled back) in the plan made for its parameters and in the generic plan the
// hot-path pool keeps; the rows it takes from tasks, kept or filtered out, are counted.
func TestWaitingHeadsReadNoBacklog(t *testing.T) {
	ctx := context.Background()
	store := testenv.NewStore(t)
	rr := storage.FairnessRoundRobin
	for _, q := range []storage.Queue{{Name: "plain", MaxRetries: 3}, {Name: "fair", MaxRetries: 3, Fairness: &rr},
		{Name: "mixed", MaxRetries: 3}} {
		if _, err := store.CreateQueue(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	pool := store.Pool()
	// Every level's head is due; a fifth of the plain queue's tasks wait an hour more.
	for _, stmt := range []string{
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries)
			SELECT gen_random_uuid(), 'plain', '{}', 1 + g % 10, CASE WHEN g % 7 = 0 THEN 'retry' ELSE 'pending' END,
				now() - interval '1 hour' + g * interval '1 millisecond'
					+ CASE WHEN g % 5 = 1 THEN interval '2 hours' ELSE interval '0' END, 3
			FROM generate_series(1, 30000) AS g`,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, group_key)
			SELECT gen_random_uuid(), 'fair', '{}', 1 + g % 10, 'pending', now() - interval '1 hour' + g * interval '1 millisecond', 3,
				CASE WHEN g % 3 <> 0 THEN 'tenant-' || g % 2000 END
			FROM generate_series(1, 15000) AS g`,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, group_key)
			SELECT gen_random_uuid(), 'mixed', '{}', 1 + g % 10, 'pending', now() - interval '1 hour' + g * interval '1 millisecond', 3,
				CASE WHEN g % 2 = 0 THEN 'g' || g % 10 END
			FROM generate_series(1, 10000) AS g`,
		`ANALYZE tasks`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	const enqueueArgs = `'%s', 'due', ARRAY[gen_random_uuid()], '{"{}"}', '{5}', '{NULL}', '{NULL}', '{NULL}',
		'{NULL}', ARRAY[NULL::bytea], NULL, NULL, true, ARRAY[%s]::text[]`
	cases := []headsCase{
		{"dispatch plain", storage.Statements["dispatch_due"], `'plain', 10, 1000, NULL`},
		{"dispatch plain, strict priority", storage.Statements["dispatch_due"], `'plain', 10, 1e12, NULL`},
		{"dispatch mixed", storage.Statements["dispatch_due"], `'mixed', 10, 1000, NULL`},
		{"due queues", storage.Statements["due_queues"], `NULL`},
		{"oldest waiting", storage.Statements["oldest_waiting"], `'{plain,fair,mixed}'`},
		{"bulk prune plain", storage.Statements["bulk_prune_heads"], `'plain'`},
		{"bulk prune fair", storage.Statements["bulk_prune_heads"], `'fair'`},
		{"bulk prune mixed", storage.Statements["bulk_prune_heads"], `'mixed'`},
		{"enqueue plain", storage.Statements["enqueue_tasks"], fmt.Sprintf(enqueueArgs, "plain", "NULL")},
		{"enqueue refs mixed", storage.Statements["enqueue_task_refs"], fmt.Sprintf(enqueueArgs, "mixed", "'g3'")},
		{"enqueue fair named", storage.Statements["enqueue_task_refs"], fmt.Sprintf(enqueueArgs, "fair", "'tenant-7'")},
		{"enqueue fair unnamed", storage.Statements["enqueue_task_refs"], fmt.Sprintf(enqueueArgs, "fair", "NULL")},
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	checkHeadsRead(t, conn, cases, "the new schema")
	// A database upgraded with a backlog keeps the two old indexes until the operator
	// drops them (migration 0032): the statements must not take them.
	for _, ddl := range oldWaitingIndexes {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE tasks"); err != nil {
		t.Fatal(err)
	}
	checkHeadsRead(t, conn, cases, "the old indexes kept")
}

// oldWaitingIndexes are the indexes of waiting tasks that migration 0032 drops, as
// the releases before it had them.
var oldWaitingIndexes = []string{
	`CREATE INDEX tasks_dispatch_idx ON tasks (queue, priority, scheduled_at) WHERE status IN ('pending', 'retry')`,
	`CREATE INDEX tasks_queue_due_idx ON tasks (queue, scheduled_at) WHERE status IN ('pending', 'retry') AND priority > 0`,
}

// headsCase is a statement run with its arguments, written as SQL.
type headsCase struct{ name, sql, args string }

// checkHeadsRead runs each case (EXPLAIN ANALYZE, rolled back) in the plan made for
// its arguments and in a generic one, and fails when one takes more than 500 rows
// from tasks or scans the table.
func checkHeadsRead(t *testing.T, conn *pgxpool.Conn, cases []headsCase, schema string) {
	t.Helper()
	ctx := context.Background()
	for i, c := range cases {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			stmt := fmt.Sprintf("heads_%d", i)
			if _, err := conn.Conn().Prepare(ctx, stmt, c.sql); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var out []byte
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE "+stmt+"("+c.args+")").Scan(&out); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if err := conn.Conn().Deallocate(ctx, stmt); err != nil {
				t.Fatal(err)
			}
			var plans []struct{ Plan planNode }
			if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
				t.Fatalf("%s: plan %s: %v", c.name, out, err)
			}
			if read, seq := plans[0].Plan.tasksRead(); read > 500 || seq {
				t.Errorf("%s, %s (%s): %.0f rows of tasks read, want at most 500 (sequential scan: %v):\n%s",
					c.name, schema, mode, read, seq, out)
			}
		}
	}
}

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON), the fields the row count needs.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Rows      float64    `json:"Actual Rows"`
	Loops     float64    `json:"Actual Loops"`
	Filtered  float64    `json:"Rows Removed by Filter"`
	Rechecked float64    `json:"Rows Removed by Index Recheck"`
	Plans     []planNode `json:"Plans"`
}

// tasksRead is how many rows the scans of tasks under n returned or filtered out
// (EXPLAIN gives both per loop), and whether one of them read the whole table.
func (n planNode) tasksRead() (read float64, seq bool) {
	if n.Relation == "tasks" && strings.HasSuffix(n.NodeType, "Scan") {
		read = (n.Rows + n.Filtered + n.Rechecked) * n.Loops
		seq = n.NodeType == "Seq Scan" || strings.HasPrefix(n.NodeType, "Bitmap")
	}
	for _, c := range n.Plans {
		r, s := c.tasksRead()
		read, seq = read+r, seq || s
	}
	return read, seq
}

// TestOldWaitingIndexesStayBesideABacklog: migration 0032 drops the two old indexes
// of waiting tasks on a database holding at most 10,000 waiting tasks, and keeps them
// on one holding more, where the previous release's dispatch, planned on them, would
// otherwise sort a priority level's backlog every pass.
func TestOldWaitingIndexesStayBesideABacklog(t *testing.T) {
	ctx := context.Background()
	_, pool := queueWithRows(t)
	left := func() (n int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = 'tasks'
			AND indexname IN ('tasks_dispatch_idx', 'tasks_queue_due_idx')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The schema of a release before 0032, holding waiting tasks; then 0032 applies.
	upgrade := func(waiting int) {
		t.Helper()
		stmts := append([]string{`DROP INDEX tasks_named_dispatch_idx`}, oldWaitingIndexes...)
		stmts = append(stmts, `DELETE FROM taskforge_migrations WHERE version = 32`,
			fmt.Sprintf(`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries)
				SELECT gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3 FROM generate_series(1, %d)`, waiting))
		for _, stmt := range stmts {
			if _, err := pool.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		if applied, err := migrations.Apply(ctx, pool); err != nil || !slices.Equal(applied, []int{32}) {
			t.Fatalf("migrations applied %v, %v; want [32]", applied, err)
		}
	}
	upgrade(10000)
	if n := left(); n != 0 {
		t.Fatalf("0032 kept %d of the 2 old indexes beside 10,000 waiting tasks, want none", n)
	}
	upgrade(1)
	if n := left(); n != 2 {
		t.Fatalf("0032 kept %d of the 2 old indexes beside 10,001 waiting tasks, want both", n)
	}
}

// TestPlainDispatchKeepsOneLineAcrossGroups: in a queue without fairness, the
// dispatch takes due tasks by eligible time across its groups and its unnamed group
// alike, now that the two are read from different indexes (migration 0032).
func TestPlainDispatchKeepsOneLineAcrossGroups(t *testing.T) {
	ctx := context.Background()
	store, pool := queueWithRows(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var want []uuid.UUID
	for i, group := range []string{"a", "", "b", "", "a", "c"} {
		id := uuid.New()
		var g *string
		if group != "" {
			g = &group
		}
		if _, err := pool.Exec(ctx, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, group_key)
			VALUES ($1, 'q', '{}', 5, 'pending', $2, 3, $3)`, id, t0.Add(time.Duration(i)*time.Second), g); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	var got []uuid.UUID
	for range 3 {
		moved, err := store.DispatchDue(ctx, "q", 2, 1000)
		if err != nil {
			t.Fatal(err)
		}
		// The statement returns a batch in no set order.
		slices.SortFunc(moved, func(a, b storage.Buffered) int { return a.ScheduledAt.Compare(b.ScheduledAt) })
		for _, b := range moved {
			got = append(got, b.ID)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dispatched %v, want in eligible time across groups %v", got, want)
	}
}
