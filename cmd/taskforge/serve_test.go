package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestServeFlagsFromEnvironment: settings come from their variables, a flag
// overrides its variable, and a variable that does not parse is reported (serve
// then exits 2) instead of being read as its zero value.
func TestServeFlagsFromEnvironment(t *testing.T) {
	t.Setenv("TASKFORGE_REDIS_CLUSTER", "true")
	t.Setenv("TASKFORGE_LEASE_TIMEOUT", "45s")
	var f serverFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	f.register(fs)
	if len(f.envErrs) != 0 || !f.cfg.RedisCluster || f.cfg.LeaseTimeout.String() != "45s" {
		t.Fatalf("from the environment: cluster %v, lease %s, errors %v", f.cfg.RedisCluster, f.cfg.LeaseTimeout, f.envErrs)
	}
	if err := fs.Parse([]string{"--redis-cluster=false"}); err != nil || f.cfg.RedisCluster {
		t.Fatalf("--redis-cluster=false over $TASKFORGE_REDIS_CLUSTER=true: %v, cluster %v", err, f.cfg.RedisCluster)
	}

	t.Setenv("TASKFORGE_REDIS_CLUSTER", "maybe")
	var bad serverFlags
	bad.register(pflag.NewFlagSet("serve", pflag.ContinueOnError))
	if len(bad.envErrs) != 1 || !strings.Contains(bad.envErrs[0].Error(), "$TASKFORGE_REDIS_CLUSTER") {
		t.Fatalf("errors %v, want one naming $TASKFORGE_REDIS_CLUSTER", bad.envErrs)
	}
}

// TestListenDatabaseURLFromEnvironment: the LISTEN URL comes from its variable and
// the flag overrides it, "off" included.
func TestListenDatabaseURLFromEnvironment(t *testing.T) {
	t.Setenv("TASKFORGE_LISTEN_DATABASE_URL", "postgres://direct:5432/tf")
	var f serverFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	f.register(fs)
	if got := f.cfg.ListenDatabaseURL; got != "postgres://direct:5432/tf" {
		t.Fatalf("from the environment: %q", got)
	}
	if err := fs.Parse([]string{"--listen-database-url=off"}); err != nil || f.cfg.ListenDatabaseURL != "off" {
		t.Fatalf("--listen-database-url=off over the variable: %v, %q", err, f.cfg.ListenDatabaseURL)
	}
}

// TestStopTimeoutFlags: the three stop phases' deadlines come from their variables,
// their flags override them, and one that does not parse is reported.
func TestStopTimeoutFlags(t *testing.T) {
	t.Setenv("TASKFORGE_SHUTDOWN_TIMEOUT", "20s")
	t.Setenv("TASKFORGE_REST_STOP_TIMEOUT", "2s")
	var f serverFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse([]string{"--feed-stop-timeout=3s"}); err != nil {
		t.Fatal(err)
	}
	got := [3]string{f.cfg.ShutdownTimeout.String(), f.cfg.FeedStopTimeout.String(), f.cfg.RestStopTimeout.String()}
	if len(f.envErrs) != 0 || got != [3]string{"20s", "3s", "2s"} {
		t.Fatalf("stop timeouts %v (errors %v), want [20s 3s 2s]", got, f.envErrs)
	}

	t.Setenv("TASKFORGE_FEED_STOP_TIMEOUT", "soon")
	var bad serverFlags
	bad.register(pflag.NewFlagSet("serve", pflag.ContinueOnError))
	if len(bad.envErrs) != 1 || !strings.Contains(bad.envErrs[0].Error(), "$TASKFORGE_FEED_STOP_TIMEOUT") {
		t.Fatalf("errors %v, want one naming $TASKFORGE_FEED_STOP_TIMEOUT", bad.envErrs)
	}
}
