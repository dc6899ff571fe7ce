package compose_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v4"

	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

var metricName = regexp.MustCompile(`\btaskforge_[a-z_]+`)

// exportedMetrics drives a task through done, retry, dead and a reclaim on a real
// replica and returns the names of every metric family its /metrics serves.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) {
		c.LeaseTimeout = 300 * time.Millisecond
		c.HeartbeatInterval = 100 * time.Millisecond
		c.WatchdogInterval = 50 * time.Millisecond
	}})
	s.CreateQueue("q", map[string]any{"max_retries": 1, "backoff_base_ms": 0, "backoff_max_ms": 0, "rate_limit": 1000})
	s.CreateQueue("held", map[string]any{"paused": true})
	s.Poll("w", []string{"held"}, 1, 0) // a limited poll
	for i := 0; i < 4; i++ {
		s.Enqueue("q", map[string]any{"payload": i})
	}
	poll := func() testserver.Polled {
		for {
			if p := s.Poll("w", []string{"q"}, 1, 2000); len(p) == 1 {
				return p[0]
			}
		}
	}
	s.Ack("w", poll())
	s.Nack("w", poll(), "retry me", nil)
	s.Nack("w", poll(), "dead", map[string]any{"retryable": false})
	s.Release("w", poll(), "stopping")
	poll() // left to expire, so the watchdog reclaims it
	families := map[string]bool{}
	testserver.Eventually(t, 10*time.Second, "a reclaim counted", func() bool {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		parsed, err := parser.TextToMetricFamilies(bytes.NewReader(s.Must(200, "GET", "/metrics", nil).Body))
		if err != nil {
			t.Fatal(err)
		}
		for name := range parsed {
			families[name] = true
		}
		return families["taskforge_watchdog_reclaims_total"]
	})
	return families
}

// known reports whether a metric name in an expression is served: histogram series
// carry _bucket, _sum and _count suffixes.
func known(families map[string]bool, name string) bool {
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && families[base] {
			return true
		}
	}
	return false
}

func TestAlertRulesAndDashboardUseExportedMetrics(t *testing.T) {
	t.Parallel()
	families := exportedMetrics(t)

	raw, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			if r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q lacks expr, severity or summary", r.Alert)
			}
			if _, err := time.ParseDuration(strings.ReplaceAll(r.For, "0m", "0s")); r.For != "" && err != nil {
				t.Errorf("rule %q: for %q: %v", r.Alert, r.For, err)
			}
			for _, m := range metricName.FindAllString(r.Expr, -1) {
				if !known(families, m) {
					t.Errorf("rule %q uses %s, which TaskForge does not export", r.Alert, m)
				}
			}
		}
	}
	for _, want := range []string{"TaskForgeDeadLettersGrowing", "TaskForgeWorkerStale", "TaskForgeOldestPendingTooOld", "TaskForgeDispatchLatencyHigh"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}

	dash, err := os.ReadFile("grafana/taskforge.json")
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dash, &board); err != nil {
		t.Fatalf("grafana dashboard: %v", err)
	}
	if len(board.Panels) < 8 {
		t.Fatalf("dashboard has %d panels", len(board.Panels))
	}
	for _, p := range board.Panels {
		for _, target := range p.Targets {
			for _, m := range metricName.FindAllString(target.Expr, -1) {
				if !known(families, m) {
					t.Errorf("panel %q uses %s, which TaskForge does not export", p.Title, m)
				}
			}
		}
	}

	// promtool, where installed (Debian package prometheus), checks the PromQL too.
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "rules", "prometheus/alerts.yml").CombinedOutput(); err != nil {
			t.Fatalf("promtool check rules: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not installed: PromQL syntax not checked")
	}
}
