package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/client"
)

func TestCLIWorkflowCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.want(0, "queue", "create", "ci")
	file := filepath.Join(t.TempDir(), "ci.json")
	if err := os.WriteFile(file, []byte(`{"name": "ci", "steps": [
		{"step": "build", "queue": "ci", "payload": {"commit": "abc"}},
		{"step": "test", "queue": "ci", "payload": 1, "depends_on": ["build"]},
		{"step": "lint", "queue": "ci", "payload": 2, "depends_on": ["build"]},
		{"step": "deploy", "queue": "ci", "payload": 3, "depends_on": ["test", "lint"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var wf client.Workflow
	e.json(&wf, "workflow", "submit", file)
	if wf.Status != "running" || len(wf.Steps) != 4 || *wf.Step("deploy").Status != "blocked" {
		t.Fatalf("submitted: %+v", wf)
	}
	r := e.want(0, "workflow", "get", wf.ID)
	contains(t, "get output", r.stdout, "status:", "running", "STEP", "DEPENDS_ON", "deploy", "blocked", "test,lint")
	r = e.want(0, "workflow", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], "0/4") {
		t.Fatalf("workflow list:\n%s", r.stdout)
	}
	r = e.want(0, "workflow", "cancel", wf.ID)
	contains(t, "cancel output", r.stdout, "status:", "cancelled")
	e.want(exitConflict, "workflow", "cancel", wf.ID)
	e.want(exitNotFound, "workflow", "get", "00000000-0000-0000-0000-000000000000")
	bad := filepath.Join(t.TempDir(), "cycle.json")
	if err := os.WriteFile(bad, []byte(`{"steps": [{"step": "a", "queue": "ci", "payload": 1, "depends_on": ["b"]},
		{"step": "b", "queue": "ci", "payload": 1, "depends_on": ["a"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r = e.want(exitUsage, "workflow", "submit", bad)
	contains(t, "cycle error", r.stderr, "cycle", "a → b → a")
	e.want(exitUsage, "workflow", "submit", filepath.Join(t.TempDir(), "missing.json"))
}
