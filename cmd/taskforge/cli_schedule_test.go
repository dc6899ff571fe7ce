package main

import (
	"strings"
	"testing"

	"github.com/taskforge/taskforge/client"
)

func TestCLIScheduleCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.want(0, "queue", "create", "reports")
	r := e.want(0, "schedule", "create", "nightly", "--queue", "reports", "--cron", "30 2 * * *",
		"--timezone", "Europe/Berlin", "--payload", `{"kind":"nightly"}`, "--priority", "2", "--max-retries", "1")
	contains(t, "create output", r.stdout, "name:", "nightly", "cron:", "30 2 * * *", "timezone:", "Europe/Berlin", "next_run_at:", "priority:", "2")
	r = e.want(exitConflict, "schedule", "create", "nightly", "--queue", "reports", "--cron", "@daily", "--payload", "1")
	contains(t, "stderr", r.stderr, "schedule_exists")
	e.want(exitUsage, "schedule", "create", "bad", "--queue", "reports", "--cron", "every day", "--payload", "1") // the server says 400
	e.want(exitUsage, "schedule", "create", "bad", "--queue", "reports", "--cron", "@daily", "--timezone", "Mars/Olympus", "--payload", "1")
	e.want(exitUsage, "schedule", "create", "bad", "--queue", "reports", "--payload", "1") // no --cron
	e.want(exitUsage, "schedule", "create", "bad", "--queue", "reports", "--cron", "@daily", "--payload", "{")
	e.want(exitNotFound, "schedule", "create", "lost", "--queue", "nope", "--cron", "@daily", "--payload", "1")

	r = e.want(0, "schedule", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "nightly") {
		t.Fatalf("schedule list:\n%s", r.stdout)
	}
	var list struct{ Schedules []client.Schedule }
	e.json(&list, "schedule", "list", "--queue", "reports")
	if len(list.Schedules) != 1 || list.Schedules[0].Priority != 2 {
		t.Fatalf("schedule list -o json: %+v", list)
	}
	var paused client.Schedule
	e.json(&paused, "schedule", "update", "nightly", "--paused", "--max-retries", "default")
	if !paused.Paused || paused.NextRunAt != nil || paused.MaxRetries != nil {
		t.Fatalf("paused: %+v", paused)
	}
	e.want(exitUsage, "schedule", "update", "nightly") // nothing to change
	var resumed client.Schedule
	e.json(&resumed, "schedule", "update", "nightly", "--paused=false")
	if resumed.Paused || resumed.NextRunAt == nil {
		t.Fatalf("resumed: %+v", resumed)
	}
	r = e.want(0, "schedule", "trigger", "nightly")
	contains(t, "trigger output", r.stdout, "schedule:", "nightly", "status:", "pending")
	var got client.Schedule
	e.json(&got, "schedule", "get", "nightly")
	if got.LastTaskID == nil || !got.NextRunAt.Equal(*resumed.NextRunAt) {
		t.Fatalf("after trigger: %+v", got)
	}
	e.want(0, "schedule", "delete", "nightly")
	e.want(exitNotFound, "schedule", "get", "nightly")
	e.want(exitNotFound, "schedule", "trigger", "nightly")

	// A queue that a schedule targets cannot be deleted; the error names the schedule.
	e.want(0, "queue", "create", "spare")
	e.want(0, "schedule", "create", "idle", "--queue", "spare", "--cron", "@yearly", "--payload", "null")
	r = e.want(exitConflict, "queue", "delete", "spare")
	contains(t, "stderr", r.stderr, "queue_not_empty", "idle")
	e.want(0, "schedule", "delete", "idle")
	e.want(0, "queue", "delete", "spare")
}
