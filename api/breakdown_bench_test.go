package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

// spans collects wall-clock durations by name and reports their medians.
type spans map[string][]time.Duration

func (s spans) time(name string, f func()) {
	start := time.Now()
	f()
	s[name] = append(s[name], time.Since(start))
}

func (s spans) report(b *testing.B) {
	for name, ds := range s {
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), name+"-p50-µs")
	}
}

// BenchmarkBreakdownHTTP times, for one worker alone (1x1/plain), each request of a
// task's life over HTTP: the enqueue, the poll that waits for it (the dispatcher's
// hop included), the ack, and beside them a poll that finds a buffered task and
// GET /healthz (the HTTP and middleware floor). Medians per request, in µs.
func BenchmarkBreakdownHTTP(b *testing.B) {
	s := testserver.Start(b, testserver.Options{})
	s.CreateQueue("q", nil)
	s.CreateQueue("b", nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	post := func(path string, body any, out any) {
		enc, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", s.URL+path, bytes.NewReader(enc))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			b.Fatalf("%s: %d %s", path, resp.StatusCode, data)
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				b.Fatal(err)
			}
		}
	}
	type polled struct {
		Tasks []struct {
			ID         string `json:"id"`
			LeaseToken string `json:"lease_token"`
		} `json:"tasks"`
	}
	ack := func(sp spans, name string, p polled) {
		sp.time(name, func() {
			post("/workers/ack", map[string]any{"worker_id": "w", "task_id": p.Tasks[0].ID, "lease_token": p.Tasks[0].LeaseToken}, nil)
		})
	}
	sp := spans{}
	left := 0
	for b.Loop() {
		if left == 0 {
			b.StopTimer()
			tasks := make([]map[string]any, 1000)
			for i := range tasks {
				tasks[i] = map[string]any{"payload": i}
			}
			post("/queues/b/tasks/batch", map[string]any{"tasks": tasks}, nil)
			left = 1000
			testserver.Eventually(b, 30*time.Second, "buffered", func() bool {
				return s.Redis.ZCard(b.Context(), s.Server.Buffer.Key("b")).Val() == 1000
			})
			b.StartTimer()
		}
		sp.time("healthz", func() {
			resp, err := client.Get(s.URL + "/healthz")
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
		var p polled
		sp.time("poll-buffered", func() {
			post("/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"b"}, "max_tasks": 1}, &p)
		})
		if len(p.Tasks) != 1 {
			b.Fatalf("polled %d", len(p.Tasks))
		}
		left--
		ack(sp, "ack", p)

		start := time.Now()
		sp.time("enqueue", func() { post("/queues/q/tasks", map[string]any{"payload": 1}, nil) })
		sp.time("poll-after-enqueue", func() {
			post("/workers/poll", map[string]any{"worker_id": "w", "queues": []string{"q"}, "max_tasks": 1, "wait_ms": 5000}, &p)
		})
		sp["enqueue-to-worker"] = append(sp["enqueue-to-worker"], time.Since(start))
		if len(p.Tasks) != 1 {
			b.Fatalf("polled %d after enqueue", len(p.Tasks))
		}
		ack(sp, "ack", p)
	}
	sp.report(b)
}

// BenchmarkBreakdownStorage times each statement and Redis call of one task's life
// on its own, serially, without HTTP: enqueue, dispatch, ZADD, the Lua pop, claim,
// ack, the done announcement, and the worker record of a poll.
func BenchmarkBreakdownStorage(b *testing.B) {
	ctx := context.Background()
	store := testenv.NewStore(b)
	if _, err := store.CreateQueue(ctx, storage.Queue{Name: "q", MaxRetries: 3, BackoffBaseMs: 1000, BackoffMaxMs: 3600000}); err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b)})
	b.Cleanup(func() { _ = rdb.Close() })
	buf := buffer.New(rdb, testenv.RedisPrefix(b))
	sp := spans{}
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		id := uuid.Must(uuid.NewV7())
		sp.time("pg-enqueue", func() {
			_, err := store.Enqueue(ctx, "q", []storage.NewTask{{ID: id, Payload: json.RawMessage(`1`), Priority: 1}}, nil)
			must(err)
		})
		var due []storage.Buffered
		sp.time("pg-dispatch", func() {
			var err error
			due, err = store.DispatchDue(ctx, "q", 500, 1e13)
			must(err)
		})
		sp.time("redis-add", func() { must(buf.Add(ctx, "q", due, 1e13)) })
		sp.time("redis-pop", func() {
			_, err := buf.Pop(ctx, "q", 1, ratelimit.Limits{})
			must(err)
		})
		var claimed map[uuid.UUID]storage.Task
		sp.time("pg-claim", func() {
			var err error
			claimed, err = store.ClaimMany(ctx, []storage.ClaimItem{{TaskID: id, WorkerID: "w"}}, 30*time.Second)
			must(err)
		})
		t := claimed[id]
		if t.LeaseToken == nil {
			b.Fatal("not claimed")
		}
		sp.time("pg-ack", func() {
			// The statement the lifecycle picks for this token (a plain task's).
			_, err := store.Ack(ctx, "w", id, *t.LeaseToken, nil)
			must(err)
		})
		sp.time("redis-publish-done", func() { must(buf.PublishDone(ctx, id)) })
		sp.time("pg-record-worker", func() { must(store.RecordWorker(ctx, "w", []string{"q"})) })
		sp.time("pg-select-1", func() { must(store.Ping(ctx)) })
		sp.time("redis-ping", func() { must(rdb.Ping(ctx).Err()) })
	}
	sp.report(b)
}
