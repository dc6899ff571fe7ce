package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestProbeURLFollowsTheListenAddress(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string]string{
		"":               "http://127.0.0.1:8080/healthz",
		":8080":          "http://127.0.0.1:8080/healthz",
		":9000":          "http://127.0.0.1:9000/healthz",
		"0.0.0.0:8081":   "http://127.0.0.1:8081/healthz",
		"[::]:8082":      "http://127.0.0.1:8082/healthz",
		"10.0.0.7:8080":  "http://10.0.0.7:8080/healthz",
		"localhost:8080": "http://localhost:8080/healthz",
		"[::1]:8080":     "http://[::1]:8080/healthz",
	} {
		if got := probeURL(listen); got != want {
			t.Errorf("probeURL(%q) = %q, want %q", listen, got, want)
		}
	}
}

// TestProbeAgainstARealReplica: healthy on a running replica's /healthz and
// /readyz; unhealthy on a 404 and on a port nobody listens on.
func TestProbeAgainstARealReplica(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	ctx := context.Background()
	for _, path := range []string{"/healthz", "/readyz"} {
		if err := probe(ctx, s.URL+path, timeout); err != nil {
			t.Errorf("probe %s: %v", path, err)
		}
	}
	if err := probe(ctx, s.URL+"/no-such-page", timeout); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("probe of a 404 = %v, want an error naming 404", err)
	}
	closed := fmt.Sprintf("http://127.0.0.1:%d/healthz", testenv.FreePort(t))
	start := time.Now()
	if err := probe(ctx, closed, timeout); err == nil {
		t.Error("probe of a closed port succeeded")
	}
	if took := time.Since(start); took > timeout+time.Second {
		t.Errorf("probe of a closed port took %s", took)
	}
}
