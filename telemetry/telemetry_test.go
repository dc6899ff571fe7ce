package telemetry_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// scrape reads a replica's /metrics into name{labels} → value (counters, gauges,
// and histogram sample counts as name_count).
func scrape(t *testing.T, s *testserver.Instance) map[string]float64 {
	t.Helper()
	resp := s.Must(200, "GET", "/metrics", nil)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(resp.Body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		if !strings.HasPrefix(name, "taskforge_") {
			continue
		}
		for _, m := range f.GetMetric() {
			key := name + labels(m)
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[name+"_count"+labels(m)] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func labels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// sum adds the values of key over several scrapes (counters are per replica).
func sum(key string, scrapes ...map[string]float64) float64 {
	total := 0.0
	for _, s := range scrapes {
		total += s[key]
	}
	return total
}

func poll(t *testing.T, s *testserver.Instance, worker string) testserver.Polled {
	t.Helper()
	for i := 0; i < 100; i++ {
		if p := s.Poll(worker, []string{"q"}, 1, 2000); len(p) == 1 {
			return p[0]
		}
	}
	t.Fatal("no task to poll")
	return testserver.Polled{}
}

func TestMetricDeltasAndTransitionLogsAcrossTwoReplicas(t *testing.T) {
	t.Parallel()
	short := func(c *server.Config) {
		c.LeaseTimeout = 600 * time.Millisecond
		c.HeartbeatInterval = 200 * time.Millisecond
		c.WatchdogInterval = 100 * time.Millisecond
	}
	var logsA, logsB testserver.LogBuffer
	a := testserver.Start(t, testserver.Options{Configure: short, Log: &logsA})
	b := testserver.Start(t, testserver.Options{Configure: short, Log: &logsB,
		DatabaseURL: a.Config.DatabaseURL, RedisPrefix: a.Config.RedisPrefix})
	a.CreateQueue("q", map[string]any{"max_retries": 3, "backoff_base_ms": 0, "backoff_max_ms": 0})
	beforeA, beforeB := scrape(t, a), scrape(t, b)

	// Every transition: done first time, retried then done, dead, cancelled while
	// waiting, abandoned then done, a replay of the dead one, and released then done.
	t1 := a.Enqueue("q", map[string]any{"payload": 1, "priority": 1})
	p := poll(t, a, "wa")
	if p.ID != t1.ID {
		t.Fatalf("polled %s", p.ID)
	}
	a.Must(200, "POST", "/workers/ack", map[string]any{"worker_id": "wa", "task_id": p.ID, "lease_token": p.LeaseToken})

	a.Enqueue("q", map[string]any{"payload": 2})
	p = poll(t, b, "wb")
	b.Nack("wb", p, "flaky", map[string]any{"retry_after_ms": 0})
	p = poll(t, a, "wa")
	a.Ack("wa", p)

	t3 := a.Enqueue("q", map[string]any{"payload": 3})
	p = poll(t, b, "wb")
	b.Nack("wb", p, "bad", map[string]any{"retryable": false})

	t4 := a.Enqueue("q", map[string]any{"payload": 4, "scheduled_at": "2099-01-01T00:00:00Z"})
	b.Must(200, "DELETE", "/queues/q/tasks/"+t4.ID, nil)

	t5 := a.Enqueue("q", map[string]any{"payload": 5})
	lost := poll(t, a, "crashed")
	if lost.ID != t5.ID {
		t.Fatalf("polled %s, want %s", lost.ID, t5.ID)
	}
	p = poll(t, b, "wb") // after the lease expired and the watchdog reclaimed it
	if p.ID != t5.ID || p.Attempt != 2 {
		t.Fatalf("re-delivery: %+v", p)
	}
	b.Ack("wb", p)

	a.Must(201, "POST", "/queues/q/dlq/"+t3.ID+"/replay", nil)
	p = poll(t, a, "wa")
	a.Ack("wa", p)

	t6 := a.Enqueue("q", map[string]any{"payload": 6}) // released by a stopping worker, then done
	p = poll(t, b, "wb")
	if p.ID != t6.ID {
		t.Fatalf("polled %s, want %s", p.ID, t6.ID)
	}
	b.Release("wb", p, "stopping")
	p = poll(t, a, "wa")
	a.Ack("wa", p)

	var afterA, afterB map[string]float64
	testserver.Eventually(t, 10*time.Second, "gauges caught up", func() bool {
		afterA, afterB = scrape(t, a), scrape(t, b)
		return afterA[`taskforge_queue_depth{queue=q,status=done}`] == 5 && afterB[`taskforge_queue_depth{queue=q,status=done}`] == 5
	})
	counters := map[string]float64{
		`taskforge_tasks_enqueued_total{queue=q}`:                                7,
		`taskforge_tasks_dispatched_total{queue=q}`:                              9,
		`taskforge_tasks_completed_total{queue=q,status=done}`:                   5,
		`taskforge_tasks_completed_total{queue=q,status=dead}`:                   1,
		`taskforge_tasks_completed_total{queue=q,status=cancelled}`:              1,
		`taskforge_task_retries_total{queue=q}`:                                  2,
		`taskforge_task_releases_total{queue=q}`:                                 1,
		`taskforge_watchdog_reclaims_total{queue=q,reason=abandoned}`:            1,
		`taskforge_task_execution_duration_seconds_count{queue=q}`:               9,
		`taskforge_dispatch_latency_seconds_count{queue=q}`:                      9,
		`taskforge_http_requests_total{code=200,method=POST,route=/workers/ack}`: 5,
	}
	for key, want := range counters {
		if got := sum(key, afterA, afterB) - sum(key, beforeA, beforeB); got != want {
			t.Errorf("%s rose by %v across both replicas, want %v", key, got, want)
		}
	}
	for _, scr := range []map[string]float64{afterA, afterB} { // gauges agree on every replica
		gauges := map[string]float64{
			`taskforge_queue_depth{queue=q,status=done}`:      5,
			`taskforge_queue_depth{queue=q,status=dead}`:      1,
			`taskforge_queue_depth{queue=q,status=cancelled}`: 1,
			`taskforge_queue_depth{queue=q,status=pending}`:   0,
			`taskforge_dlq_depth{queue=q}`:                    1,
			`taskforge_buffer_size{queue=q}`:                  0,
		}
		for key, want := range gauges {
			if got := scr[key]; got != want {
				t.Errorf("%s = %v, want %v", key, got, want)
			}
		}
		if _, ok := scr[`taskforge_worker_heartbeat_age_seconds{worker_id=wb}`]; !ok {
			t.Errorf("no heartbeat age for worker wb")
		}
	}

	// The logs of both replicas tell t5's whole life, one JSON line per transition.
	var lines []map[string]any
	for _, logs := range []string{logsA.String(), logsB.String()} {
		sc := bufio.NewScanner(strings.NewReader(logs))
		for sc.Scan() {
			var line map[string]any
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatalf("log line is not JSON: %q", sc.Text())
			}
			if line["msg"] == "task transition" && line["task_id"] == t5.ID {
				lines = append(lines, line)
			}
		}
	}
	var path []string
	for _, l := range lines {
		for _, field := range []string{"task_id", "queue", "worker_id", "from_status", "to_status", "attempt", "duration_ms"} {
			if _, ok := l[field]; !ok {
				t.Errorf("transition line lacks %q: %v", field, l)
			}
		}
		path = append(path, fmt.Sprintf("%v>%v", l["from_status"], l["to_status"]))
	}
	want := []string{">pending", "pending>claimed", "claimed>executing", "executing>retry", "retry>claimed", "claimed>executing", "executing>done"}
	if len(path) != len(want) {
		t.Fatalf("t5's transitions: %v, want %v", path, want)
	}
	seen := map[string]int{}
	for _, p := range path {
		seen[p]++
	}
	for _, w := range want {
		if seen[w] == 0 {
			t.Fatalf("t5's transitions %v lack %s", path, w)
		}
		seen[w]--
	}
}
