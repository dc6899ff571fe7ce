package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

// envRunMain makes the test binary run main() instead of the tests: the SIGTERM
// test starts the real command as a separate process this way, without a build.
const envRunMain = "TASKFORGE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		os.Exit(0)
	}
	testenv.Main(m)
}

// result is what one command run printed and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

// run executes the client commands in-process exactly as main does: the same
// command constructors, "taskforge: <err>" on stderr, and the exit code of an
// exitError (1 for any other error).
func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	root := &cobra.Command{Use: "taskforge", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(workerCommand(), queueCommand(), groupCommand(), scheduleCommand(), workflowCommand(), taskCommand(), dlqCommand(), workersCommand(), statsCommand(), auditCommand(), benchCommand())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	code := 0
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(&errOut, "taskforge:", err)
		code = 1
		var exit exitError
		if errors.As(err, &exit) {
			code = exit.code
		}
	}
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

// cliEnv is a real server and a way to run commands against it.
type cliEnv struct {
	t *testing.T
	s *testserver.Instance
	c *client.Client
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	s := testserver.Start(t, testserver.Options{})
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &cliEnv{t: t, s: s, c: c}
}

// run runs a command with --server pointing at the test server.
func (e *cliEnv) run(args ...string) result {
	e.t.Helper()
	return run(e.t, "", append(args, "--server", e.s.URL)...)
}

// want runs a command and fails unless it exits with code; it returns the result.
func (e *cliEnv) want(code int, args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != code {
		e.t.Fatalf("taskforge %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	return r
}

// json runs a command with -o json, wanting exit 0, and decodes its output into v.
func (e *cliEnv) json(v any, args ...string) {
	e.t.Helper()
	r := e.want(0, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		e.t.Fatalf("taskforge %s -o json: %v\n%s", strings.Join(args, " "), err, r.stdout)
	}
}

func contains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func TestCLIQueueCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	r := e.want(0, "queue", "create", "emails", "--max-retries", "5", "--rate-limit", "10", "--backoff-base", "500ms", "--backoff-max", "1m")
	contains(t, "create output", r.stdout, "name:", "emails", "max_retries:", "5", "rate_limit:", "10", "rate_burst:", "500ms .. 1m0s")
	r = e.want(exitConflict, "queue", "create", "emails")
	contains(t, "stderr", r.stderr, "taskforge: ", "queue_exists")
	e.want(exitUsage, "queue", "create", "bad name")                      // the server says 400
	e.want(exitUsage, "queue", "create", "x", "--max-retries", "500")     // the server says 400
	e.want(exitUsage, "queue", "create", "x", "--rate-limit", "fast")     // the CLI says so
	e.want(exitUsage, "queue", "create")                                  // no name
	e.want(exitUsage, "queue", "create", "a", "b")                        // two names
	e.want(exitUsage, "queue", "create", "x", "--max-retries", "several") // not an int
	e.want(0, "queue", "create", "reports", "--paused")

	r = e.want(0, "queue", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "emails") || !strings.Contains(lines[2], "true") {
		t.Fatalf("queue list:\n%s", r.stdout)
	}
	var list struct{ Queues []client.Queue }
	e.json(&list, "queue", "list")
	if len(list.Queues) != 2 || list.Queues[0].MaxRetries != 5 || list.Queues[0].BackoffBaseMs != 500 {
		t.Fatalf("queue list -o json: %+v", list)
	}
	e.want(exitUsage, "queue", "list", "-o", "yaml")

	var q client.Queue
	e.json(&q, "queue", "get", "emails")
	if q.Name != "emails" || *q.RateLimit != 10 {
		t.Fatalf("queue get: %+v", q)
	}
	r = e.want(exitNotFound, "queue", "get", "nope")
	contains(t, "stderr", r.stderr, `get queue "nope"`, "queue_not_found")

	e.json(&q, "queue", "update", "emails", "--rate-limit", "none", "--max-concurrency", "2", "--priority-aging", "30s")
	if q.RateLimit != nil || q.MaxConcurrency == nil || *q.MaxConcurrency != 2 || q.MaxRetries != 5 || *q.PriorityAgingMs != 30000 {
		t.Fatalf("queue update: %+v", q)
	}
	r = e.want(0, "queue", "update", "emails", "--priority-aging", "none")
	contains(t, "update output", r.stdout, "priority_aging:   -", "max_concurrency:  2")
	e.want(exitUsage, "queue", "update", "emails", "--priority-aging", "often")
	e.want(exitUsage, "queue", "update", "emails") // nothing to change

	// Retention: ages in days or any duration, forever, and back to the server's default.
	r = e.want(0, "queue", "get", "emails")
	contains(t, "default retention", r.stdout, "retention:", "done 7d, cancelled 7d, dead forever")
	e.json(&q, "queue", "update", "emails", "--retention-done", "1d12h", "--retention-dead", "30d")
	if q.Retention.DoneMs == nil || *q.Retention.DoneMs != 36*3600*1000 || q.Retention.DeadMs == nil ||
		*q.Retention.DeadMs != 30*24*3600*1000 || q.Retention.CancelledMs == nil || *q.Retention.CancelledMs != 7*24*3600*1000 {
		t.Fatalf("queue update --retention-*: %+v", q.Retention)
	}
	r = e.want(0, "queue", "update", "emails", "--retention-cancelled", "forever")
	contains(t, "update output", r.stdout, "done 36h0m0s, cancelled forever, dead 30d")
	e.want(exitUsage, "queue", "update", "emails", "--retention-done", "a week")                    // the CLI says so
	e.want(exitUsage, "queue", "update", "emails", "--retention-done", "30s")                       // the server says 400
	e.want(exitUsage, "queue", "update", "emails", "--retention-default", "--retention-dead", "1d") // both
	r = e.want(0, "queue", "update", "emails", "--retention-default")
	contains(t, "reset output", r.stdout, "done 7d, cancelled 7d, dead forever")
	e.json(&q, "queue", "create", "audit", "--retention-dead", "90d")
	if q.Retention.DeadMs == nil || *q.Retention.DeadMs != 90*24*3600*1000 || *q.Retention.DoneMs != 7*24*3600*1000 {
		t.Fatalf("queue create --retention-dead: %+v", q.Retention)
	}
	e.want(0, "queue", "delete", "audit")
	e.want(exitNotFound, "queue", "update", "nope", "--paused")

	r = e.want(0, "queue", "pause", "emails")
	contains(t, "pause output", r.stdout, "queue emails paused")
	if e.json(&q, "queue", "get", "emails"); !q.Paused {
		t.Fatal("queue pause did not pause")
	}
	e.want(0, "queue", "resume", "emails")
	if e.json(&q, "queue", "get", "emails"); q.Paused {
		t.Fatal("queue resume did not resume")
	}
	e.want(exitNotFound, "queue", "pause", "nope")

	e.s.Enqueue("emails", map[string]any{"payload": 1})
	r = e.want(exitConflict, "queue", "delete", "emails")
	contains(t, "stderr", r.stderr, "queue_not_empty")
	r = e.want(0, "queue", "delete", "reports")
	contains(t, "delete output", r.stdout, "queue reports deleted")
	e.want(exitNotFound, "queue", "delete", "reports")

	e.want(exitUsage, "queue", "bogus")
	e.want(exitUsage, "queue", "list", "--bogus")
	r = e.want(0, "queue")
	contains(t, "bare group", r.stdout, "Available Commands", "create", "pause")
}

func TestCLITaskCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.s.CreateQueue("q", map[string]any{"paused": true}) // tasks stay pending

	var task client.Task
	e.json(&task, "task", "enqueue", "q", "--payload", `{"n": 1}`, "--priority", "2", "--max-retries", "7", "--timeout", "3s")
	if task.Status != client.StatusPending || task.Priority != 2 || task.MaxRetries != 7 || *task.TimeoutSeconds != 3 {
		t.Fatalf("enqueued %+v", task)
	}
	r := e.want(0, "task", "enqueue", "q", "--payload", "1", "--delay", "1h")
	contains(t, "enqueue output", r.stdout, "id:", "status:", "pending")
	e.want(exitUsage, "task", "enqueue", "q", "--payload", "{bad")
	e.want(exitUsage, "task", "enqueue", "q")
	e.want(exitUsage, "task", "enqueue", "q", "--payload", "1", "--file", "x")
	e.want(exitUsage, "task", "enqueue", "q", "--payload", "1", "--priority", "11")
	e.want(exitUsage, "task", "enqueue", "q", "--payload", "1", "--at", "tomorrow")
	e.want(exitNotFound, "task", "enqueue", "nope", "--payload", "1")
	var k1, k2 client.Task
	e.json(&k1, "task", "enqueue", "q", "--payload", "1", "--idempotency-key", "k")
	e.json(&k2, "task", "enqueue", "q", "--payload", "1", "--idempotency-key", "k")
	if k1.ID != k2.ID {
		t.Fatalf("idempotent enqueue made two tasks")
	}
	r = e.want(exitConflict, "task", "enqueue", "q", "--payload", "2", "--idempotency-key", "k")
	contains(t, "stderr", r.stderr, "idempotency_conflict")

	r = e.want(0, "task", "get", "q", task.ID)
	contains(t, "get output", r.stdout, task.ID, "status:", "pending", `{"n":`, "result:            -", "no attempts yet")
	e.want(exitNotFound, "task", "get", "q", "00000000-0000-0000-0000-000000000000")
	e.want(exitNotFound, "task", "get", "q", "not-a-uuid")
	e.want(exitNotFound, "task", "get", "nope", task.ID)
	e.want(exitUsage, "task", "get", "q")

	// Batch enqueue from a file: 2500 lines in batches of at most 1000.
	var file strings.Builder
	for i := range 2500 {
		fmt.Fprintf(&file, `{"payload": {"i": %d}, "priority": %d}`+"\n", i, 1+i%10)
		if i == 7 {
			file.WriteString("\n") // blank lines are skipped
		}
	}
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	r = e.want(0, "task", "enqueue", "q", "--file", path)
	contains(t, "batch output", r.stdout, "enqueued 2500 tasks to q")
	contains(t, "batch progress", r.stderr, "enqueued 1000/2500 (40%)", "enqueued 2000/2500 (80%)", "enqueued 2500/2500 (100%)")
	pending := func() int64 {
		st, err := e.c.Stats(context.Background(), "q")
		if err != nil {
			t.Fatal(err)
		}
		return st.Depth[client.StatusPending]
	}
	before := pending()
	if before != 2503 { // 3 tasks enqueued one by one, 2500 from the file
		t.Fatalf("%d pending tasks after the file, want 2503", before)
	}
	// A bad line rejects the whole file before anything is sent.
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"payload\": 1}\n{\"payload\": 2}\n{\"payload\": 3, \"colour\": \"red\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = e.want(exitUsage, "task", "enqueue", "q", "--file", bad)
	contains(t, "stderr", r.stderr, "bad.jsonl:3:", "colour")
	e.want(exitUsage, "task", "enqueue", "q", "--file", filepath.Join(t.TempDir(), "missing.jsonl"))
	// Standard input; a batch the server refuses stops there and says how far it got.
	r = run(t, "{\"payload\": 1}\n{\"payload\": 2}\n{\"payload\": 3}\n{\"payload\": 4, \"priority\": 99}\n",
		"task", "enqueue", "q", "--file", "-", "--batch-size", "2", "--server", e.s.URL)
	if r.code != exitUsage {
		t.Fatalf("partial batch failure: exit %d\n%s", r.code, r.stderr)
	}
	contains(t, "stderr", r.stderr, "enqueued 2 of 4 tasks", "tasks 3..4 failed", "invalid_request")
	if n := pending(); n != before+2 {
		t.Fatalf("%d pending tasks, want %d", n, before+2)
	}

	// Listing: pages, the cursor, --all, filters.
	r = e.want(0, "task", "list", "q", "--limit", "2")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("task list --limit 2:\n%s", r.stdout)
	}
	contains(t, "stderr", r.stderr, "more: add --cursor ")
	var page struct {
		Tasks      []client.Task
		NextCursor *string `json:"next_cursor"`
	}
	e.json(&page, "task", "list", "q", "--limit", "2")
	first := page.Tasks[0].ID
	e.json(&page, "task", "list", "q", "--limit", "2", "--cursor", *page.NextCursor)
	if len(page.Tasks) != 2 || page.Tasks[0].ID == first {
		t.Fatalf("second page: %+v", page.Tasks)
	}
	e.json(&page, "task", "list", "q", "--all", "--limit", "500", "--status", "pending")
	if int64(len(page.Tasks)) != before+2 || page.NextCursor != nil {
		t.Fatalf("task list --all: %d tasks, cursor %v", len(page.Tasks), page.NextCursor)
	}
	e.want(exitUsage, "task", "list", "q", "--status", "bogus")
	e.want(exitUsage, "task", "list", "q", "--created-after", "yesterday")
	e.want(exitNotFound, "task", "list", "nope")

	r = e.want(0, "task", "cancel", "q", task.ID)
	contains(t, "cancel output", r.stdout, "task "+task.ID+" cancelled")
	r = e.want(exitConflict, "task", "cancel", "q", task.ID)
	contains(t, "stderr", r.stderr, "task_not_cancellable")
	e.want(exitNotFound, "task", "cancel", "q", "00000000-0000-0000-0000-000000000000")

	// An executing task: the cancel is requested, its worker hears it later.
	e.s.CreateQueue("live", nil)
	live := e.s.Enqueue("live", map[string]any{"payload": 1})
	var polled []testserver.Polled
	testserver.Eventually(t, 5*time.Second, "task polled", func() bool {
		polled = e.s.Poll("cli-worker", []string{"live"}, 1, 500)
		return len(polled) == 1
	})
	r = e.want(0, "task", "cancel", "live", live.ID)
	contains(t, "cancel output", r.stdout, "cancel requested", "cli-worker")
	r = e.want(0, "task", "get", "live", live.ID)
	contains(t, "get output", r.stdout, "cancel_requested:", "true", "ATTEMPT", "cli-worker", "executing")

	// task wait: a finished task at once; a waiting one until --timeout, exit 1.
	r = e.want(0, "task", "wait", "q", task.ID)
	contains(t, "wait output", r.stdout, "cancelled")
	later := time.Now().Add(time.Hour).Format(time.RFC3339)
	w := e.s.Enqueue("q", map[string]any{"payload": 1, "scheduled_at": later})
	// 300 ms, and 1 ms, which runs out before any answer: the task is still shown.
	for _, timeout := range []string{"300ms", "1ms"} {
		r = e.want(exitFailure, "task", "wait", "q", w.ID, "--timeout", timeout)
		contains(t, "wait stderr", r.stderr, "still pending")
		contains(t, "wait output", r.stdout, "pending")
	}
	e.want(exitNotFound, "task", "wait", "q", "00000000-0000-0000-0000-000000000000")

	// Bulk cancel: by ids, by status; bad combinations are usage errors.
	more := []string{e.s.Enqueue("q", map[string]any{"payload": 2, "scheduled_at": later}).ID,
		e.s.Enqueue("q", map[string]any{"payload": 3, "scheduled_at": later}).ID}
	r = e.want(0, "task", "cancel", "q", more[0], w.ID)
	contains(t, "bulk cancel output", r.stdout, "cancelled 2 tasks of q")
	r = e.want(0, "task", "cancel", "q", "--status", "pending")
	contains(t, "cancel --status output", r.stdout, "cancelled ", " tasks of q")
	if got, err := e.c.GetTask(context.Background(), "q", more[1]); err != nil || got.Status != client.StatusCancelled {
		t.Fatalf("after cancel --status pending: %v %v", got, err)
	}
	e.want(exitUsage, "task", "cancel", "q", more[1], "--status", "pending")
	e.want(exitUsage, "task", "cancel", "q")
	r = e.want(exitUsage, "task", "cancel", "q", "--status", "done")
	contains(t, "stderr", r.stderr, "invalid_request")
}

func TestCLIDeadLetterCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.s.CreateQueue("q", nil)
	for i := range 5 {
		e.s.Enqueue("q", map[string]any{"payload": i})
	}
	var dead []string
	testserver.Eventually(t, 10*time.Second, "five dead tasks", func() bool {
		for _, p := range e.s.Poll("w", []string{"q"}, 5, 200) {
			if r := e.s.Nack("w", p, "bad input\nwith detail", map[string]any{"retryable": false}); r.Status != 200 {
				t.Fatalf("nack: %d %s", r.Status, r.Body)
			}
			dead = append(dead, p.ID)
		}
		return len(dead) == 5
	})

	r := e.want(0, "dlq", "list", "q")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "DIED") {
		t.Fatalf("dlq list:\n%s", r.stdout)
	}
	contains(t, "dlq list", lines[1], "bad input…") // the first line of the error
	r = e.want(0, "dlq", "list", "q", "--limit", "2")
	contains(t, "stderr", r.stderr, "more: add --cursor")
	var page struct{ Tasks []client.Task }
	e.json(&page, "dlq", "list", "q", "--limit", "2", "--all")
	if len(page.Tasks) != 5 || page.Tasks[0].DiedAt == nil {
		t.Fatalf("dlq list --all: %+v", page.Tasks)
	}
	e.want(exitNotFound, "dlq", "list", "nope")

	r = e.want(0, "dlq", "replay", "q", dead[0])
	contains(t, "replay output", r.stdout, "DEAD_ID", "NEW_ID", dead[0], "pending")
	e.want(exitUsage, "dlq", "replay", "q")
	e.want(exitUsage, "dlq", "replay", "q", dead[1], "--all")
	e.want(exitUsage, "dlq", "replay", "q", dead[1], "--skip-replayed")
	e.want(exitNotFound, "dlq", "replay", "q", "00000000-0000-0000-0000-000000000000")

	// Bulk replay with progress: four never replayed, in batches of two.
	r = e.want(0, "dlq", "replay", "q", "--all", "--skip-replayed", "--batch-size", "2")
	contains(t, "replay output", r.stdout, "replayed 4 dead tasks of q")
	contains(t, "progress", r.stderr, "replayed 2/4 (50%)", "replayed 4/4 (100%)")
	var all struct{ Replayed []client.Task }
	e.json(&all, "dlq", "replay", "q", "--all")
	if len(all.Replayed) != 5 {
		t.Fatalf("replay --all replayed %d, want all 5", len(all.Replayed))
	}
	src, err := e.c.GetTask(context.Background(), "q", dead[0])
	if err != nil || src.ReplayCount != 2 {
		t.Fatalf("dead task %s replayed %d times (%v), want 2", dead[0], src.ReplayCount, err)
	}

	r = e.want(0, "dlq", "discard", "q", dead[1], dead[2])
	contains(t, "discard output", r.stdout, "discarded 2 dead tasks of q")
	r = e.want(exitNotFound, "dlq", "discard", "q", dead[3], dead[1])
	contains(t, "stderr", r.stderr, "discarded 1 of 2 dead tasks", "task_not_found")
	e.want(exitUsage, "dlq", "discard", "q")
	e.want(exitUsage, "dlq", "discard", "q", dead[0], "--all")
	r = e.want(0, "dlq", "discard", "q", "--all")
	contains(t, "discard --all output", r.stdout, "discarded 2 dead tasks of q")
}

func TestCLIWorkersAndStats(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.s.CreateQueue("q", nil)
	e.s.CreateQueue("other", nil)
	for i := range 3 {
		e.s.Enqueue("q", map[string]any{"payload": i})
	}
	testserver.Eventually(t, 5*time.Second, "one task polled", func() bool {
		return len(e.s.Poll("cli-w1", []string{"q", "other"}, 1, 200)) == 1
	})

	r := e.want(0, "workers")
	contains(t, "workers", r.stdout, "ID", "QUEUES", "cli-w1", "q,other", "false")
	var ws struct{ Workers []client.WorkerInfo }
	e.json(&ws, "workers")
	if len(ws.Workers) != 1 || len(ws.Workers[0].CurrentTasks) != 1 {
		t.Fatalf("workers -o json: %+v", ws)
	}
	e.want(exitUsage, "workers", "extra")

	r = e.want(0, "stats", "q")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "QUEUE") || !strings.HasPrefix(lines[1], "q ") {
		t.Fatalf("stats q:\n%s", r.stdout)
	}
	// All queues: history's day partitions follow the table.
	r = e.want(0, "stats")
	contains(t, "stats", r.stdout, "history done", "history cancelled", "history dead", "days, oldest ")
	if !strings.Contains(r.stdout, "last retention sweep") && !strings.Contains(r.stdout, "no retention sweep yet") {
		t.Errorf("stats does not say how the janitor's last sweep went:\n%s", r.stdout)
	}
	var hist struct{ History client.History }
	if e.json(&hist, "stats"); len(hist.History.Statuses) != 3 || hist.History.Statuses[0].Partitions < 4 {
		t.Errorf("stats -o json: history %+v", hist.History)
	}
	var st struct{ Stats []client.Stats }
	e.json(&st, "stats")
	if len(st.Stats) != 2 || st.Stats[0].Queue != "other" || st.Stats[1].Depth[client.StatusExecuting] != 1 ||
		st.Stats[1].Depth[client.StatusPending]+st.Stats[1].Depth[client.StatusClaimed] != 2 {
		t.Fatalf("stats -o json: %+v", st)
	}
	e.want(exitNotFound, "stats", "q", "nope")
}

func TestCLIServerUnreachable(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: refused at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	for _, args := range [][]string{
		{"queue", "list"}, {"queue", "create", "q"}, {"task", "enqueue", "q", "--payload", "1"},
		{"task", "get", "q", "00000000-0000-0000-0000-000000000000"}, {"dlq", "replay", "q", "--all"},
		{"workers"}, {"stats"},
	} {
		r := run(t, "", append(args, "--server", closed)...)
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "server unreachable") {
			t.Errorf("taskforge %s against a closed port: exit %d, want %d\n%s", strings.Join(args, " "), r.code, exitUnavailable, r.stderr)
		}
	}
	// A server that accepts connections but never answers: the request times out.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	t0 := time.Now()
	r := run(t, "", "queue", "list", "--server", "http://"+hung.Addr().String(), "--request-timeout", "300ms")
	if r.code != exitUnavailable || time.Since(t0) > 5*time.Second {
		t.Errorf("hung server: exit %d after %s, want %d\n%s", r.code, time.Since(t0), exitUnavailable, r.stderr)
	}
	if r := run(t, "", "queue", "list", "--server", "localhost:8080"); r.code != exitUsage {
		t.Errorf("a server URL without scheme: exit %d, want %d", r.code, exitUsage)
	}
}

// TestServerURLFromEnvironment cannot run in parallel: it sets TASKFORGE_URL.
func TestServerURLFromEnvironment(t *testing.T) {
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("from-env", nil)
	t.Setenv("TASKFORGE_URL", s.URL)
	r := run(t, "", "queue", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "from-env") {
		t.Fatalf("queue list with TASKFORGE_URL: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Setenv("TASKFORGE_URL", "")
	r = run(t, "", "queue", "list", "--help")
	contains(t, "help", r.stdout, `(default "`+client.DefaultURL+`")`)
}

// TestExitCodeContract checks the error → exit code table for every API error
// code, including those a live server is hard to drive into (503).
func TestExitCodeContract(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]int{
		"invalid_request": exitUsage, "payload_too_large": exitUsage,
		"not_found": exitNotFound, "queue_not_found": exitNotFound, "task_not_found": exitNotFound,
		"queue_exists": exitConflict, "queue_not_empty": exitConflict, "task_not_cancellable": exitConflict,
		"idempotency_conflict": exitConflict, "lease_lost": exitConflict,
		"unavailable": exitUnavailable, "internal": exitFailure, "method_not_allowed": exitFailure,
	} {
		err := fmt.Errorf("op: %w", &client.APIError{Status: 400, Code: code, Message: "m"})
		if got := exitCodeOf(err); got != want {
			t.Errorf("%s: exit %d, want %d", code, got, want)
		}
	}
	if got := exitCodeOf(&client.APIError{Status: 502, Code: "http_502"}); got != exitUnavailable {
		t.Errorf("502 from a proxy: exit %d, want %d", got, exitUnavailable)
	}
	if got := exitCodeOf(errors.New("something else")); got != exitFailure {
		t.Errorf("other error: exit %d, want %d", got, exitFailure)
	}
	var e exitError
	if !errors.As(withExitCode(usagef("bad")), &e) || e.code != exitUsage {
		t.Errorf("a usage error lost its code: %+v", e)
	}
}

// TestCLIAudit: `taskforge audit` lists the recorded actions newest first, as a
// table or JSON, filters by queue, pages with --cursor and refuses a bad --limit.
func TestCLIAudit(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.s.CreateQueue("q", nil)
	e.s.CreateQueue("other", nil)
	e.s.Must(200, "PATCH", "/queues/q", map[string]any{"rate_limit": 7})

	r := e.want(0, "audit")
	contains(t, "audit", r.stdout, "ACTOR", "anonymous", "PATCH /queues/:name", `{"rate_limit":7}`, "POST /queues")
	var page struct {
		Entries    []client.AuditEntry `json:"entries"`
		NextCursor *string             `json:"next_cursor"`
	}
	e.json(&page, "audit", "--queue", "q", "--limit", "1")
	if len(page.Entries) != 1 || page.Entries[0].Method != "PATCH" || page.NextCursor == nil {
		t.Fatalf("audit --queue q --limit 1 -o json: %+v", page)
	}
	e.json(&page, "audit", "--queue", "q", "--limit", "1", "--cursor", *page.NextCursor)
	if len(page.Entries) != 1 || page.Entries[0].Method != "POST" || page.NextCursor != nil {
		t.Fatalf("second page: %+v", page)
	}
	e.want(exitUsage, "audit", "--limit", "0")
}

// TestCLITaskGetShowsReleases: `task get` says how many attempts stopping workers
// released, since they do not count against max_retries, and the progress the
// last attempt reported.
func TestCLITaskGetShowsReleases(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.s.CreateQueue("q", map[string]any{"max_retries": 0})
	task := e.s.Enqueue("q", map[string]any{"payload": 1})
	var p []testserver.Polled
	testserver.Eventually(t, 5*time.Second, "the task polled", func() bool {
		p = e.s.Poll("w", []string{"q"}, 1, 200)
		return len(p) == 1
	})
	r := e.want(0, "task", "get", "q", task.ID)
	contains(t, "task get", r.stdout, "progress")
	if hb := e.s.Do("POST", "/workers/heartbeat", map[string]any{"worker_id": "w", "task_id": p[0].ID,
		"lease_token": p[0].LeaseToken, "progress": map[string]any{"rows": 1200}}); hb.Status != 200 {
		t.Fatalf("heartbeat with progress: %d %s", hb.Status, hb.Body)
	}
	if resp := e.s.Release("w", p[0], "deploy"); resp.Status != 200 {
		t.Fatalf("release: %d %s", resp.Status, resp.Body)
	}
	r = e.want(0, "task", "get", "q", task.ID)
	contains(t, "task get", r.stdout, "1 (max_retries 0), 1 released by stopping workers or snoozed (not counted)", "released",
		`{"rows":1200}`)
}
