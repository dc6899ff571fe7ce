package e2e_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/storage"
)

// listenApplication names serve's LISTEN session in pg_stat_activity.
const listenApplication = "taskforge-listen"

// bouncedReplica is a `taskforge serve` whose DATABASE_URL goes through PgBouncer
// in transaction mode, and a store on the same database directly, for the test to
// enqueue as another replica would and to check PostgreSQL.
type bouncedReplica struct {
	*replica
	direct *storage.Store
}

// startBehindPgBouncer starts PgBouncer in front of a fresh database and serve
// behind it, with TASKFORGE_LISTEN_DATABASE_URL set to listen (a direct URL is
// built when listen is "direct") and the dispatch tick given; it creates queue q
// with a 100 ms retry backoff.
func startBehindPgBouncer(t *testing.T, listen string, tick time.Duration) bouncedReplica {
	t.Helper()
	dbURL := testenv.NewDatabase(t)
	bouncer := testenv.StartPgBouncer(t, dbURL)
	if listen == "direct" {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", listenApplication)
		u.RawQuery = q.Encode()
		listen = u.String()
	}
	r := startReplica(t, []string{
		"DATABASE_URL=" + bouncer.URL,
		"TASKFORGE_LISTEN_DATABASE_URL=" + listen,
		"REDIS_URL=redis://" + testenv.RedisAddr(t),
		"TASKFORGE_REDIS_PREFIX=" + testenv.RedisPrefix(t),
		"TASKFORGE_DISPATCH_INTERVAL=" + tick.String(),
		"TASKFORGE_LOG_LEVEL=warn",
	})
	t.Cleanup(func() {
		// Named prepared statements lent across server sessions fail like this.
		if log, _ := os.ReadFile(r.LogPath); strings.Contains(string(log), "prepared statement") {
			t.Errorf("serve logged prepared statement errors behind PgBouncer:\n%s", tail(string(log), 20))
		}
	})
	pool, err := storage.Connect(context.Background(), dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if resp := testserver.Do(t, r.URL, "POST", "/queues",
		map[string]any{"name": "q", "backoff_base_ms": 100, "backoff_max_ms": 100}, nil); resp.Status != 201 {
		t.Fatalf("create queue: %d %s", resp.Status, resp.Body)
	}
	return bouncedReplica{replica: r, direct: storage.New(pool)}
}

// enqueue enqueues one task over HTTP and returns its id.
func (b bouncedReplica) enqueue(t *testing.T) string {
	t.Helper()
	resp := testserver.Do(t, b.URL, "POST", "/queues/q/tasks", map[string]any{"payload": map[string]any{"n": 1}}, nil)
	if resp.Status != 201 {
		t.Fatalf("enqueue: %d %s", resp.Status, resp.Body)
	}
	var task struct {
		ID string `json:"id"`
	}
	resp.JSON(t, &task)
	return task.ID
}

// enqueueElsewhere enqueues one task straight into PostgreSQL, as another replica
// would: this serve hears of it only by NOTIFY or on its tick.
func (b bouncedReplica) enqueueElsewhere(t *testing.T) string {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	if _, err := b.direct.Enqueue(context.Background(), "q",
		[]storage.NewTask{{ID: id, Payload: json.RawMessage(`{"n":2}`), Priority: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	return id.String()
}

// poll long-polls until one task arrives, within timeout, and checks it is want at
// the given attempt.
func (b bouncedReplica) poll(t *testing.T, want string, attempt int, timeout time.Duration) testserver.Polled {
	t.Helper()
	var got []testserver.Polled
	testserver.Eventually(t, timeout, "task "+want+" delivered", func() bool {
		resp := testserver.Do(t, b.URL, "POST", "/workers/poll",
			map[string]any{"worker_id": "w", "queues": []string{"q"}, "max_tasks": 1, "wait_ms": 1000}, nil)
		if resp.Status != 200 {
			t.Fatalf("poll: %d %s", resp.Status, resp.Body)
		}
		var out struct {
			Tasks []testserver.Polled `json:"tasks"`
		}
		resp.JSON(t, &out)
		got = out.Tasks
		return len(got) > 0
	})
	if got[0].ID != want || got[0].Attempt != attempt {
		t.Fatalf("delivered task %s attempt %d, want %s attempt %d", got[0].ID, got[0].Attempt, want, attempt)
	}
	return got[0]
}

// report acks (nack false) or nacks p and returns the task's status in the answer.
func (b bouncedReplica) report(t *testing.T, p testserver.Polled, nack bool) string {
	t.Helper()
	path, body := "/workers/ack", map[string]any{"worker_id": "w", "task_id": p.ID, "lease_token": p.LeaseToken}
	if nack {
		path, body["error"] = "/workers/nack", "try again"
	}
	resp := testserver.Do(t, b.URL, "POST", path, body, nil)
	if resp.Status != 200 {
		t.Fatalf("%s: %d %s", path, resp.Status, resp.Body)
	}
	var task struct {
		Status string `json:"status"`
	}
	resp.JSON(t, &task)
	return task.Status
}

// checkHistory checks in PostgreSQL that task id is in status with attempts of
// the given statuses, in order.
func (b bouncedReplica) checkHistory(t *testing.T, id, status string, attempts ...string) {
	t.Helper()
	ctx := context.Background()
	var got string
	var history []string
	if err := b.direct.Pool().QueryRow(ctx, `SELECT t.status,
		coalesce((SELECT array_agg(a.status ORDER BY a.attempt) FROM all_attempts a WHERE a.task_id = t.id), '{}')
		FROM all_tasks t WHERE t.id = $1`, id).Scan(&got, &history); err != nil {
		t.Fatalf("task %s in PostgreSQL: %v", id, err)
	}
	if got != status || strings.Join(history, ",") != strings.Join(attempts, ",") {
		t.Fatalf("task %s in PostgreSQL: %s with attempts %v, want %s with %v", id, got, history, status, attempts)
	}
}

// listenSessions counts the sessions on the database whose last statement was
// LISTEN on the dispatcher's channel, and those of them named listenApplication.
func (b bouncedReplica) listenSessions(t *testing.T) (all, direct int) {
	t.Helper()
	if err := b.direct.Pool().QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE application_name = $2)
		FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN ' || $1`,
		storage.DueChannel, listenApplication).Scan(&all, &direct); err != nil {
		t.Fatal(err)
	}
	return all, direct
}

// TestServeBehindPgBouncer: with DATABASE_URL through PgBouncer in transaction mode
// and LISTEN on a direct URL, serve migrates, runs a task to done, retries a nacked
// one to done, and wakes on NOTIFY (its own enqueues' and another replica's) long
// before its one-minute tick; PostgreSQL holds the history.
func TestServeBehindPgBouncer(t *testing.T) {
	t.Parallel()
	b := startBehindPgBouncer(t, "direct", time.Minute)

	id := b.enqueue(t)
	p := b.poll(t, id, 1, 15*time.Second)
	if st := b.report(t, p, false); st != "done" {
		t.Fatalf("ack answered status %q, want done", st)
	}
	b.checkHistory(t, id, "done", "succeeded")

	id = b.enqueue(t)
	p = b.poll(t, id, 1, 15*time.Second)
	if st := b.report(t, p, true); st != "retry" {
		t.Fatalf("nack answered status %q, want retry", st)
	}
	p = b.poll(t, id, 2, 15*time.Second) // redelivered once its 100 ms backoff ends
	if st := b.report(t, p, false); st != "done" {
		t.Fatalf("ack of the retry answered status %q, want done", st)
	}
	b.checkHistory(t, id, "done", "failed", "succeeded")

	testserver.Eventually(t, 10*time.Second, "serve's LISTEN session on the direct URL", func() bool {
		_, direct := b.listenSessions(t)
		return direct == 1
	})
	id = b.enqueueElsewhere(t)
	p = b.poll(t, id, 1, 20*time.Second) // the tick is a minute: only NOTIFY is this fast
	b.report(t, p, false)
	b.checkHistory(t, id, "done", "succeeded")
}

// TestServeBehindPgBouncerWithoutListen: with TASKFORGE_LISTEN_DATABASE_URL=off
// serve opens no LISTEN session at all, and tasks still flow on the tick, whether
// enqueued through this serve or elsewhere.
func TestServeBehindPgBouncerWithoutListen(t *testing.T) {
	t.Parallel()
	b := startBehindPgBouncer(t, "off", 200*time.Millisecond)

	id := b.enqueue(t)
	p := b.poll(t, id, 1, 15*time.Second)
	if st := b.report(t, p, false); st != "done" {
		t.Fatalf("ack answered status %q, want done", st)
	}
	b.checkHistory(t, id, "done", "succeeded")

	id = b.enqueueElsewhere(t)
	p = b.poll(t, id, 1, 15*time.Second)
	if st := b.report(t, p, false); st != "done" {
		t.Fatalf("ack answered status %q, want done", st)
	}
	b.checkHistory(t, id, "done", "succeeded")

	if all, _ := b.listenSessions(t); all != 0 {
		t.Fatalf("%d LISTEN sessions with LISTEN off, want 0", all)
	}
}
