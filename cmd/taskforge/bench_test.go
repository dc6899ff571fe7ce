package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestBenchCompareUsage: `taskforge bench compare` refuses, as a usage error and
// before it reaches any server, to start without the peers program or with counts
// it cannot run.
func TestBenchCompareUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "compare"}, "--peers is required"},
		{[]string{"bench", "compare", "--peers", "/nonexistent", "--workers", "1,0"}, `--workers: "0"`},
		{[]string{"bench", "compare", "--peers", "/nonexistent", "--tasks", "-1"}, "must be at least 1"},
		{[]string{"bench", "compare", "--peers", "/nonexistent", "--rounds", "-2"}, "must be at least 1"},
		{[]string{"bench", "compare", "--peers", "/nonexistent", "--database-url", "postgres://127.0.0.1/x", "--redis-url", "127.0.0.1:6379"}, "want redis://host:port"},
		{[]string{"bench", "compare", "--peers", "/nonexistent", "--redis-url", "redis://127.0.0.1:6379"}, "give both --database-url and --redis-url"},
		{[]string{"bench", "--e1-tasks", "10", "--database-url", "postgres://127.0.0.1/x"}, "give both --database-url and --redis-url"},
		{[]string{"bench", "compare", "--peers", "/nonexistent", "--serve-env", "TASKFORGE_LISTEN=:9"}, "the harness sets TASKFORGE_LISTEN"},
		{[]string{"bench", "--serve-env", "GOMAXPROCS"}, `serve env "GOMAXPROCS": want KEY=VALUE`},
	} {
		root := &cobra.Command{Use: "taskforge", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(benchCommand())
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(tc.args)
		err := root.Execute()
		var exit exitError
		if !errors.As(err, &exit) || exit.code != exitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}

// TestBenchWithServers: `taskforge bench with-servers -- CMD` runs CMD against a
// throwaway PostgreSQL configured as production runs it and a throwaway Redis,
// passes CMD's exit status on, and leaves neither server running.
func TestBenchWithServers(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"pg_isready", "psql", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is needed (Debian: postgresql-client, redis-tools)", tool)
			}
			t.Skipf("%s not on PATH", tool)
		}
	}
	script := `pg_isready -q -d "$DATABASE_URL" && redis-cli -u "$REDIS_URL" ping &&
psql "$DATABASE_URL" -AtX -c 'SHOW autovacuum' -c 'SHOW fsync' -c 'SHOW shared_buffers' -c 'SHOW max_wal_size' -c 'SHOW max_connections' &&
echo "$DATABASE_URL $REDIS_URL"`
	r := run(t, "", "bench", "with-servers", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if want := []string{"PONG", "on", "on", "512MB", "4GB", "500"}; len(lines) != 7 || !slices.Equal(lines[:6], want) {
		t.Fatalf("got %q, want %q then the URLs", lines, want)
	}
	urls := strings.Fields(lines[6])
	if out, err := exec.Command("pg_isready", "-d", urls[0]).CombinedOutput(); err == nil {
		t.Errorf("PostgreSQL still answers after the command: %s", out)
	}
	if out, err := exec.Command("redis-cli", "-u", urls[1], "ping").CombinedOutput(); err == nil && strings.Contains(string(out), "PONG") {
		t.Errorf("Redis still answers after the command: %s", out)
	}

	if r := run(t, "", "bench", "with-servers", "--", "sh", "-c", "exit 7"); r.code != 7 {
		t.Errorf("a command that exits 7: exit %d, want 7\nstderr: %s", r.code, r.stderr)
	}
}
