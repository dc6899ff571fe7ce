// Package conformance_test runs one scenario per SDK language against a real
// replica and checks the outcome in PostgreSQL the same way for each: every SDK
// must leave the same tasks in the same states with the same attempt histories.
// The scenario's contract is README.md beside this file.
package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// lease is the replica's lease: shorter than the ack handler's 3 s of work, so
// only heartbeats keep that task.
const (
	lease             = 2 * time.Second
	heartbeatInterval = 500 * time.Millisecond
	scenarioTimeout   = 3 * time.Minute
)

// language is one SDK's scenario: setup prepares dir (builds, installs) and
// command is the scenario's argv. Adding an SDK is adding a row to languages.
type language struct {
	name    string
	setup   func(t *testing.T, dir string)
	command func(dir string) []string
}

var languages = []language{
	{
		name: "go",
		setup: func(t *testing.T, dir string) {
			run(t, "", goTool(), "build", "-o", filepath.Join(dir, "goscenario"), "./goscenario")
		},
		command: func(dir string) []string { return []string{filepath.Join(dir, "goscenario")} },
	},
	{
		name:  "python",
		setup: func(t *testing.T, dir string) { pythonVenv(t, dir) },
		command: func(dir string) []string {
			script, _ := filepath.Abs(filepath.Join(pythonSDKDir, "conformance", "scenario.py"))
			return []string{filepath.Join(dir, "venv", "bin", "python"), script}
		},
	},
	{name: "typescript", setup: typescriptSetup, command: typescriptCommand},
}

// goTool is the go command: the one on PATH, else the one of $GOROOT.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// startReplica runs a replica with the scenario's short lease and fast heartbeats.
func startReplica(t *testing.T) *testserver.Instance {
	t.Helper()
	return testserver.Start(t, testserver.Options{Configure: func(c *server.Config) {
		c.LeaseTimeout = lease
		c.HeartbeatInterval = heartbeatInterval
	}})
}

// scenarioIDs is the JSON line a scenario prints.
type scenarioIDs struct {
	Ack     string `json:"ack"`
	Nack    string `json:"nack"`
	Fail    string `json:"fail"`
	Replay  string `json:"replay"`
	Hold    string `json:"hold"`
	Grouped string `json:"grouped"`
}

// TestConformance runs each language's scenario against its own replica and
// database, checks each outcome, then checks that all languages left the same
// attempt histories.
func TestConformance(t *testing.T) {
	t.Parallel()
	histories := map[string]map[string][]string{}
	for _, lang := range languages {
		ok := t.Run(lang.name, func(t *testing.T) {
			histories[lang.name] = runScenario(t, lang)
		})
		if !ok {
			delete(histories, lang.name)
		}
	}
	var first string
	for _, lang := range languages {
		h, ok := histories[lang.name]
		if !ok {
			continue
		}
		if first == "" {
			first = lang.name
			continue
		}
		if !reflect.DeepEqual(h, histories[first]) {
			t.Errorf("attempt histories differ: %s %v, %s %v", first, histories[first], lang.name, h)
		}
	}
}

// runScenario runs lang's scenario and checks what it left in PostgreSQL; it
// returns each task's attempt statuses.
func runScenario(t *testing.T, lang language) map[string][]string {
	dir := t.TempDir()
	lang.setup(t, dir)
	s := startReplica(t)
	const queue = "conformance"
	// A fair queue: the scenario's grouped task and group settings go through the
	// groups' paths; the other tasks are the queue's unnamed group.
	s.Must(201, "POST", "/queues", map[string]any{"name": queue, "fairness": "round_robin"})

	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	argv := lang.command(dir)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TASKFORGE_URL="+s.URL, "TASKFORGE_QUEUE="+queue, "PYTHONDONTWRITEBYTECODE=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	t.Logf("%s scenario ran %s; stderr:\n%s", lang.name, time.Since(began).Round(time.Millisecond), stderr.String())
	if err != nil {
		t.Fatalf("%s scenario: %v\nstdout:\n%s", lang.name, err, stdout.String())
	}
	ids := lastJSONLine(t, stdout.String())

	conn, err := pgx.Connect(ctx, s.Config.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	histories := check(t, ctx, conn, ids)
	checkGroup(t, s)
	return histories
}

// checkGroup checks the group settings the scenario put, as the server reads them.
func checkGroup(t *testing.T, s *testserver.Instance) {
	t.Helper()
	var o struct { // the group's overrides
		Weight         *int `json:"weight"`
		MaxConcurrency *int `json:"max_concurrency"`
	}
	if err := json.Unmarshal(s.Must(200, "GET", "/queues/conformance/groups/tenant-a", nil).Body, &o); err != nil {
		t.Fatal(err)
	}
	if o.Weight == nil || *o.Weight != 3 || o.MaxConcurrency == nil || *o.MaxConcurrency != 1 {
		t.Errorf("group tenant-a: overrides weight %v, max_concurrency %v; want 3 and 1", deref(o.Weight), deref(o.MaxConcurrency))
	}
}

// lastJSONLine decodes the scenario's output line.
func lastJSONLine(t *testing.T, out string) scenarioIDs {
	t.Helper()
	var last string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	var ids scenarioIDs
	dec := json.NewDecoder(strings.NewReader(last))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ids); err != nil {
		t.Fatalf("scenario output %q is not the JSON line of ids: %v", last, err)
	}
	seen := map[string]bool{}
	for _, id := range []string{ids.Ack, ids.Nack, ids.Fail, ids.Replay, ids.Hold, ids.Grouped} {
		if id == "" || seen[id] {
			t.Fatalf("scenario ids must be six distinct task ids: %+v", ids)
		}
		seen[id] = true
	}
	return ids
}

// taskRow is what the checks read of a task.
type taskRow struct {
	status       string
	result       []byte
	progress     []byte
	attempts     int
	releases     int
	maxRetries   int
	replayedFrom *string
	group        *string
	history      []attemptRow
}

type attemptRow struct {
	status     string
	err        *string
	startedAt  time.Time
	finishedAt *time.Time
}

func (r taskRow) statuses() []string {
	s := make([]string, len(r.history))
	for i, a := range r.history {
		s[i] = a.status
	}
	return s
}

func readTask(t *testing.T, ctx context.Context, conn *pgx.Conn, id string) taskRow {
	t.Helper()
	var r taskRow
	err := conn.QueryRow(ctx, `SELECT status, result, progress, attempts, releases, max_retries, replayed_from::text, group_key
		FROM all_tasks WHERE id = $1`, id).Scan(&r.status, &r.result, &r.progress, &r.attempts, &r.releases,
		&r.maxRetries, &r.replayedFrom, &r.group)
	if err != nil {
		t.Fatalf("read task %s: %v", id, err)
	}
	rows, err := conn.Query(ctx, `SELECT status, error, started_at, finished_at FROM all_attempts
		WHERE task_id = $1 ORDER BY attempt`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var a attemptRow
		if err := rows.Scan(&a.status, &a.err, &a.startedAt, &a.finishedAt); err != nil {
			t.Fatal(err)
		}
		r.history = append(r.history, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

// jsonEqual reports whether got is the JSON value want.
func jsonEqual(got []byte, want string) bool {
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

// check is the contract's outcome, read from PostgreSQL.
func check(t *testing.T, ctx context.Context, conn *pgx.Conn, ids scenarioIDs) map[string][]string {
	t.Helper()
	tasks := map[string]taskRow{
		"ack": readTask(t, ctx, conn, ids.Ack), "nack": readTask(t, ctx, conn, ids.Nack),
		"fail": readTask(t, ctx, conn, ids.Fail), "replay": readTask(t, ctx, conn, ids.Replay),
		"hold": readTask(t, ctx, conn, ids.Hold), "grouped": readTask(t, ctx, conn, ids.Grouped),
	}
	want := map[string][]string{
		"ack": {"succeeded"}, "nack": {"failed", "succeeded"}, "fail": {"failed"},
		"replay": {"succeeded"}, "hold": {"released"}, "grouped": {"succeeded"},
	}
	histories := map[string][]string{}
	for name, r := range tasks {
		histories[name] = r.statuses()
		if !reflect.DeepEqual(r.statuses(), want[name]) {
			t.Errorf("%s: attempts %v, want %v", name, r.statuses(), want[name])
		}
	}
	if t.Failed() {
		return histories
	}

	ack := tasks["ack"]
	if ack.status != "done" || !jsonEqual(ack.result, `{"kind":"ack","ok":true}`) {
		t.Errorf("ack: %s with result %s, want done with {\"kind\":\"ack\",\"ok\":true}", ack.status, ack.result)
	}
	if a := ack.history[0]; a.finishedAt == nil || a.finishedAt.Sub(a.startedAt) <= lease {
		t.Errorf("ack: its attempt lasted %v, want more than the %v lease (heartbeats kept it)",
			durationOf(a), lease)
	}
	if !jsonEqual(ack.progress, `{"pct":50}`) {
		t.Errorf("ack: progress %s, want {\"pct\":50}", ack.progress)
	}

	nack := tasks["nack"]
	if nack.status != "done" || !jsonEqual(nack.result, `{"kind":"nack","ok":true}`) {
		t.Errorf("nack: %s with result %s, want done with {\"kind\":\"nack\",\"ok\":true}", nack.status, nack.result)
	}
	if e := nack.history[0].err; e == nil || !strings.HasPrefix(*e, "transient") {
		t.Errorf("nack: first attempt's error %v, want one starting with \"transient\"", deref(e))
	}
	if f := nack.history[0].finishedAt; f == nil || nack.history[1].startedAt.Sub(*f) < 200*time.Millisecond {
		t.Errorf("nack: the retry started %v after the failure, want at least retry_after (200ms)",
			gap(nack.history[0], nack.history[1]))
	}

	fail := tasks["fail"]
	if fail.status != "dead" || fail.maxRetries != 3 {
		t.Errorf("fail: %s with max_retries %d, want dead with 3 (a permanent error skips the budget)",
			fail.status, fail.maxRetries)
	}
	if e := fail.history[0].err; e == nil || !strings.Contains(*e, "permanent failure") {
		t.Errorf("fail: the attempt's error %v, want one containing \"permanent failure\"", deref(e))
	}

	replay := tasks["replay"]
	if replay.status != "done" || replay.replayedFrom == nil || *replay.replayedFrom != ids.Fail {
		t.Errorf("replay: %s replayed from %v, want done replayed from %s", replay.status, deref(replay.replayedFrom), ids.Fail)
	}
	if !jsonEqual(replay.result, `{"kind":"fail","ok":true}`) {
		t.Errorf("replay: result %s, want {\"kind\":\"fail\",\"ok\":true}", replay.result)
	}

	grouped := tasks["grouped"]
	if grouped.status != "done" || !jsonEqual(grouped.result, `{"kind":"grouped","ok":true}`) {
		t.Errorf("grouped: %s with result %s, want done with {\"kind\":\"grouped\",\"ok\":true}", grouped.status, grouped.result)
	}
	if grouped.group == nil || *grouped.group != "tenant-a" {
		t.Errorf("grouped: group %v, want tenant-a", deref(grouped.group))
	}
	for name, r := range tasks {
		if name != "grouped" && r.group != nil {
			t.Errorf("%s: group %q, want none (the queue's unnamed group)", name, *r.group)
		}
	}

	hold := tasks["hold"]
	// A pending task the dispatcher already moved into the Redis buffer shows as
	// claimed: pending, waiting its turn there.
	if (hold.status != "pending" && hold.status != "claimed") || hold.releases != 1 || hold.attempts-hold.releases != 0 {
		t.Errorf("hold: %s with %d attempts and %d releases, want pending, released once, no budget spent",
			hold.status, hold.attempts, hold.releases)
	}
	return histories
}

func durationOf(a attemptRow) time.Duration {
	if a.finishedAt == nil {
		return 0
	}
	return a.finishedAt.Sub(a.startedAt)
}

func gap(a, b attemptRow) time.Duration {
	if a.finishedAt == nil {
		return 0
	}
	return b.startedAt.Sub(*a.finishedAt)
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
