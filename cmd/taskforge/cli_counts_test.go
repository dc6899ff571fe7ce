package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// TestCLIQueueCheckCounts: check-counts recounts queues straight from PostgreSQL:
// exit 0 while the kept counts are exact, exit 6 with the status and its
// difference once a kept count is off (here a count delta no task backs), exit 3
// for an unknown queue, exit 2 without a database.
func TestCLIQueueCheckCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := testenv.NewMigratedDatabase(t)
	store := storage.New(pool)
	for _, q := range []string{"q", "other"} {
		if _, err := store.CreateQueue(ctx, storage.Queue{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	tasks := make([]storage.NewTask, 3)
	for i := range tasks {
		tasks[i] = storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: json.RawMessage(`{}`), Priority: 5}
	}
	if _, err := store.Enqueue(ctx, "q", tasks, nil); err != nil {
		t.Fatal(err)
	}
	want := func(code int, args ...string) result {
		t.Helper()
		r := run(t, "", append(args, "--database-url", url)...)
		if r.code != code {
			t.Fatalf("taskforge %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
		}
		return r
	}

	if r := want(0, "queue", "check-counts"); !strings.Contains(r.stdout, "the kept counts of 2 queues match") {
		t.Errorf("exact counts reported as %q", r.stdout)
	}
	want(0, "queue", "check-counts", "q")

	if _, err := pool.Exec(ctx, `INSERT INTO queue_tally_delta (queue, metric, bucket, delta) VALUES ('q', 'pending', '-infinity', 2)`); err != nil {
		t.Fatal(err)
	}
	r := want(exitDrift, "queue", "check-counts")
	if fields := strings.Fields(r.stdout); !strings.Contains(r.stdout, "KEPT-COUNTED") || !strings.Contains(strings.Join(fields, " "), "q pending +2") ||
		strings.Contains(r.stdout, "other") || !strings.Contains(r.stderr, "1 of 2 queues") {
		t.Errorf("drift reported as %q / %q, want q's pending +2 alone", r.stdout, r.stderr)
	}
	var got []queueDrift
	r = want(exitDrift, "queue", "check-counts", "q", "other", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 2 || got[0].Queue != "q" ||
		got[0].Drift["pending"] != 2 || len(got[0].Drift) != 1 || len(got[1].Drift) != 0 {
		t.Errorf("drift as JSON: %s (%v)", r.stdout, err)
	}
	want(0, "queue", "check-counts", "other")
	want(exitNotFound, "queue", "check-counts", "nope")
	if r := run(t, "", "queue", "check-counts", "q", "--database-url", ""); r.code != exitUsage {
		t.Errorf("without a database: exit %d, want %d (%s)", r.code, exitUsage, r.stderr)
	}
}
