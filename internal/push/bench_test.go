package push_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

// BenchmarkPush measures one replica pushing to a no-op loopback target, with 16
// and 128 requests in flight, the way E1 measures polling workers: 5,000 tasks
// enqueued while the queue is paused, released at once and drained (tasks/s from
// the first request to the last at the target); then enqueue → target latency of
// single enqueues at 100 tasks/s for 2 s (p50, p95). Run it alone:
//
//	go test ./internal/push/ -run '^$' -bench BenchmarkPush -benchtime 1x
func BenchmarkPush(b *testing.B) {
	for _, inflight := range []int{16, 128} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			for range b.N {
				benchPush(b, inflight)
			}
		})
	}
}

func benchPush(b *testing.B, inflight int) {
	s := testserver.Start(b, testserver.Options{Configure: func(c *server.Config) {
		c.Push.Concurrency = inflight
		c.DBMaxConns = 16
	}})
	var mu sync.Mutex
	var at []time.Time
	got := map[string]time.Time{} // task id → when the target had it
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		now := time.Now()
		mu.Lock()
		at = append(at, now)
		got[r.Header.Get("TaskForge-Task-Id")] = now
		mu.Unlock()
	}))
	b.Cleanup(tg.Close)
	s.CreateQueue("bench", map[string]any{"paused": true, "push": map[string]any{"url": tg.URL}})
	const total, batch = 5000, 1000
	for i := 0; i < total; i += batch {
		tasks := make([]map[string]any, batch)
		for j := range tasks {
			tasks[j] = map[string]any{"payload": map[string]any{"n": i + j}}
		}
		s.Must(http.StatusCreated, "POST", "/queues/bench/tasks/batch", map[string]any{"tasks": tasks})
	}
	b.ResetTimer()
	s.Must(http.StatusOK, "POST", "/queues/bench/resume", nil)
	testserver.Eventually(b, 120*time.Second, "every task pushed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(at) >= total
	})
	b.StopTimer()
	mu.Lock()
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	rate := float64(len(at)-1) / at[len(at)-1].Sub(at[0]).Seconds()
	mu.Unlock()
	b.ReportMetric(rate, "tasks/s")

	// Latency at a load well below capacity: one enqueue every 10 ms.
	const paced = 200
	sent := map[string]time.Time{}
	tick := time.NewTicker(10 * time.Millisecond)
	for i := range paced {
		<-tick.C
		start := time.Now()
		sent[s.Enqueue("bench", map[string]any{"payload": i}).ID] = start
	}
	tick.Stop()
	testserver.Eventually(b, 30*time.Second, "every paced task pushed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= total+paced
	})
	mu.Lock()
	lat := make([]time.Duration, 0, paced)
	for id, t0 := range sent {
		lat = append(lat, got[id].Sub(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95_ms")
	mu.Unlock()
}
