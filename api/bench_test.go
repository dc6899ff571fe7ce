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
// and ack it, the shape that group commit of claims and acks is for: with each ack
// a request of its own, and with each ack carried by the worker's next poll (as the
// SDK sends it when its poller is idle).
func BenchmarkPollAckParallel(b *testing.B) {
	for _, onPoll := range []bool{false, true} {
		name := "ack=alone"
		if onPoll {
			name = "ack=on-poll"
		}
		b.Run(name, func(b *testing.B) { benchPollAckParallel(b, onPoll) })
	}
}

func benchPollAckParallel(b *testing.B, ackOnPoll bool) {
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
		var held *testserver.Polled // with ackOnPoll: the task whose ack rides on the next poll
		for pb.Next() {
			body := map[string]any{"worker_id": worker, "queues": []string{"q"}, "max_tasks": 1, "wait_ms": 2000}
			if held != nil {
				body["acks"] = []map[string]any{{"task_id": held.ID, "lease_token": held.LeaseToken}}
			}
			r := s.Do("POST", "/workers/poll", body)
			if r.Status != 200 {
				b.Errorf("poll: %d %s", r.Status, r.Body)
				return
			}
			var out struct{ Tasks []testserver.Polled }
			r.JSON(b, &out)
			if len(out.Tasks) != 1 {
				b.Errorf("polled %d", len(out.Tasks))
				return
			}
			held = &out.Tasks[0]
			if !ackOnPoll {
				if r := s.Ack(worker, *held); r.Status != 200 {
					b.Errorf("ack: %d", r.Status)
					return
				}
				held = nil
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}
