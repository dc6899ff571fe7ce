package api_test

import (
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testserver"
)

// BenchmarkPollAck measures the worker path over HTTP (poll one task, ack it) on a
// queue without limits and on one with a rate limit and concurrency cap that never
// bind, so the difference is the limiter's own cost.
func BenchmarkPollAck(b *testing.B) {
	for _, bc := range []struct {
		name     string
		settings map[string]any
	}{
		{"limiter=off", nil},
		{"limiter=on", map[string]any{"rate_limit": 1e6, "rate_burst": 1e6, "max_concurrency": 1000}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := testserver.Start(b, testserver.Options{})
			s.CreateQueue("q", bc.settings)
			enqueue := func(n int) {
				tasks := make([]map[string]any, n)
				for i := range tasks {
					tasks[i] = map[string]any{"payload": i}
				}
				s.Must(201, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": tasks})
			}
			left := 0
			for b.Loop() {
				if left == 0 {
					b.StopTimer()
					enqueue(1000)
					left = 1000
					testserver.Eventually(b, 30*time.Second, "buffered", func() bool {
						return s.Redis.ZCard(b.Context(), s.Server.Buffer.Key("q")).Val() == 1000
					})
					b.StartTimer()
				}
				p := s.Poll("bench", []string{"q"}, 1, 1000)
				if len(p) != 1 {
					b.Fatalf("polled %d", len(p))
				}
				if r := s.Ack("bench", p[0]); r.Status != 200 {
					b.Fatalf("ack: %d", r.Status)
				}
				left--
			}
		})
	}
}

// BenchmarkPollAckParallel measures 16 concurrent workers that each poll one task
// and ack it, the shape that group commit of claims and acks is for.
func BenchmarkPollAckParallel(b *testing.B) {
	s := testserver.Start(b, testserver.Options{})
	s.CreateQueue("q", nil)
	total := b.N + 100
	for sent := 0; sent < total; sent += 1000 {
		tasks := make([]map[string]any, min(1000, total-sent))
		for i := range tasks {
			tasks[i] = map[string]any{"payload": i}
		}
		s.Must(201, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": tasks})
	}
	testserver.Eventually(b, 60*time.Second, "buffered", func() bool {
		return s.Redis.ZCard(b.Context(), s.Server.Buffer.Key("q")).Val() >= int64(min(total, 1000))
	})
	b.SetParallelism(8) // 16 goroutines on this 2-CPU machine
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		worker := "w-" + time.Now().Format("150405.000000000")
		for pb.Next() {
			p := s.Poll(worker, []string{"q"}, 1, 2000)
			if len(p) != 1 {
				b.Errorf("polled %d", len(p))
				return
			}
			if r := s.Ack(worker, p[0]); r.Status != 200 {
				b.Errorf("ack: %d", r.Status)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}
