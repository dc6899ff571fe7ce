package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/storage"
)

// TestMigrateMovesFinishedTasksIntoHistory: migrate moves the finished tasks that a
// release before history left in tasks into history, with a progress line on
// stderr, and a second run finds nothing to do.
func TestMigrateMovesFinishedTasksIntoHistory(t *testing.T) {
	ctx := context.Background()
	url := testenv.NewDatabase(t)
	pool, err := storage.Connect(ctx, url, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// As an older release left them: finished rows in tasks (an insert is not a
	// finishing update, which would move them at once).
	for _, sql := range []string{
		`INSERT INTO queues (name) VALUES ('q')`,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, attempts, max_retries, created_at, updated_at, finished_at)
			SELECT gen_random_uuid(), 'q', '{}', 5, (ARRAY['done', 'cancelled', 'dead'])[1 + i % 3], now(), 1, 3, now(), now(), now()
			FROM generate_series(1, 30) AS i`,
		`INSERT INTO attempts (task_id, attempt, queue, worker_id, lease_token, status, started_at, finished_at)
			SELECT id, 1, queue, 'w', gen_random_uuid(), 'succeeded', now(), now() FROM tasks`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []string{"history: 30 / 30 finished tasks moved", ""} {
		cmd := migrateCommand()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs([]string{"--database-url", url})
		if err := cmd.ExecuteContext(ctx); err != nil {
			t.Fatalf("migrate run %d: %v (stderr %s)", i+1, err, errOut.String())
		}
		if want != "" && !strings.Contains(errOut.String(), want) || want == "" && errOut.Len() > 0 {
			t.Errorf("migrate run %d: stderr %q, want %q", i+1, errOut.String(), want)
		}
	}
	var live, old, oldAttempts int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM task_history),
		(SELECT count(*) FROM attempt_history)`).Scan(&live, &old, &oldAttempts); err != nil {
		t.Fatal(err)
	}
	if live != 0 || old != 30 || oldAttempts != 30 {
		t.Errorf("after migrate: %d tasks in tasks, %d in history with %d attempts; want 0, 30, 30", live, old, oldAttempts)
	}
}
