package e2e_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

// TestScheduleFiresOncePerTickWhileReplicasAreSIGKILLed runs three `taskforge serve`
// processes on one @every 1s schedule and SIGKILLs one of them every two ticks (four times),
// starting a fresh one in its place: PostgreSQL holds exactly one task per tick, a
// second apart, none missing.
func TestScheduleFiresOncePerTickWhileReplicasAreSIGKILLed(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t)
	env := []string{
		"DATABASE_URL=" + dbURL,
		"REDIS_URL=redis://" + testenv.RedisAddr(t),
		"TASKFORGE_REDIS_PREFIX=" + testenv.RedisPrefix(t),
		"TASKFORGE_LOG_LEVEL=warn",
	}
	replicas := []*replica{startReplica(t, env), startReplica(t, env), startReplica(t, env)}
	if resp := testserver.Do(t, replicas[0].URL, "POST", "/queues", map[string]any{"name": "cron"}, nil); resp.Status != 201 {
		t.Fatalf("create queue: %d %s", resp.Status, resp.Body)
	}
	resp := testserver.Do(t, replicas[1].URL, "POST", "/schedules", map[string]any{
		"name": "every-second", "queue": "cron", "cron": "@every 1s", "payload": map[string]any{"n": 1}}, nil)
	if resp.Status != 201 {
		t.Fatalf("create schedule: %d %s", resp.Status, resp.Body)
	}
	var sch struct {
		NextRunAt time.Time `json:"next_run_at"`
	}
	resp.JSON(t, &sch)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func() int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE schedule = 'every-second'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const rounds = 4
	for i := range rounds {
		testserver.Eventually(t, 10*time.Second, "two more ticks", func() bool { return count() >= 2*(i+1) })
		victim := i % len(replicas)
		if err := replicas[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = replicas[victim].cmd.Wait()
		replicas[victim] = startReplica(t, env) // the other two fire meanwhile
	}
	testserver.Eventually(t, 10*time.Second, "two more ticks at the end", func() bool { return count() >= 2*rounds+2 })

	rows, err := conn.Query(ctx, `SELECT scheduled_at FROM tasks WHERE schedule = 'every-second' ORDER BY scheduled_at`)
	if err != nil {
		t.Fatal(err)
	}
	ticks, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	if !ticks[0].Equal(sch.NextRunAt) {
		t.Errorf("first task at %s, want the first tick %s", ticks[0], sch.NextRunAt)
	}
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Fatalf("tasks %d and %d are %s apart (want 1 s: one task per tick, none missed): %v", i-1, i, d, ticks)
		}
	}
	var late float64
	if err := conn.QueryRow(ctx, `SELECT extract(epoch FROM max(created_at - scheduled_at)) FROM tasks WHERE schedule = 'every-second'`).Scan(&late); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d ticks across %d SIGKILLs, one task each; worst lateness (tick to insert) %.3f s", len(ticks), rounds, late)
}
