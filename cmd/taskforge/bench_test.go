package main

import (
	"bytes"
	"errors"
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
		{[]string{"bench", "compare", "--peers", "/nonexistent", "--redis-url", "127.0.0.1:6379"}, "want redis://host:port"},
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
