package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/internal/testserver"
)

// runToken runs the token, queue and workers commands in-process as main does.
func runToken(t *testing.T, args ...string) result {
	t.Helper()
	root := &cobra.Command{Use: "taskforge", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(tokenCommand(), queueCommand(), workersCommand())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	code := 0
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(&errOut, "taskforge:", err)
		code = 1
		var exit exitError
		if errors.As(err, &exit) {
			code = exit.code
		}
	}
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

// TestCLITokenCommands: bootstrap an admin token straight into PostgreSQL, then
// create, list and revoke tokens through the server with it; the client commands
// carry --token, and refused requests fail.
func TestCLITokenCommands(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	want := func(code int, args ...string) result {
		t.Helper()
		r := runToken(t, args...)
		if r.code != code {
			t.Fatalf("taskforge %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
		}
		return r
	}
	boot := want(0, "token", "create", "--role", "admin", "--name", "bootstrap", "--database-url", s.Config.DatabaseURL)
	admin := strings.TrimSpace(boot.stdout)
	if !strings.HasPrefix(admin, auth.TokenPrefix) || !strings.Contains(boot.stderr, "not shown again") {
		t.Fatalf("bootstrap printed %q / %q", boot.stdout, boot.stderr)
	}
	testserver.Eventually(t, 3*time.Second, "anonymous queue list refused", func() bool {
		r := runToken(t, "queue", "list", "--server", s.URL, "--token", "")
		return r.code == exitFailure && strings.Contains(r.stderr, "unauthorized")
	})
	want(0, "queue", "create", "a", "--server", s.URL, "--token", admin)

	var created struct {
		ID     string   `json:"id"`
		Token  string   `json:"token"`
		Role   string   `json:"role"`
		Queues []string `json:"queues"`
	}
	r := want(0, "token", "create", "--role", "producer", "--queues", "a,b", "--expires", "1h", "--name", "ci",
		"--server", s.URL, "--token", admin, "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &created); err != nil || created.Role != "producer" ||
		len(created.Queues) != 2 || !strings.HasPrefix(created.Token, auth.TokenPrefix) {
		t.Fatalf("created %s (%v)", r.stdout, err)
	}
	list := want(0, "token", "list", "--server", s.URL, "--token", admin)
	if !strings.Contains(list.stdout, created.ID) || !strings.Contains(list.stdout, "a,b") ||
		strings.Contains(list.stdout, created.Token) || strings.Contains(list.stdout, admin) {
		t.Fatalf("token list:\n%s", list.stdout)
	}
	want(0, "queue", "list", "--server", s.URL, "--token", created.Token)
	if r := want(exitFailure, "workers", "--server", s.URL, "--token", created.Token); !strings.Contains(r.stderr, "forbidden") {
		t.Fatalf("producer listing workers: %s", r.stderr)
	}
	want(exitUsage, "token", "create", "--role", "admin", "--queues", "a", "--server", s.URL, "--token", admin)
	want(exitUsage, "token", "create", "--role", "superuser", "--server", s.URL, "--token", admin)

	want(0, "token", "revoke", created.ID, "--server", s.URL, "--token", admin)
	testserver.Eventually(t, 3*time.Second, "the revoked token refused", func() bool {
		return runToken(t, "queue", "list", "--server", s.URL, "--token", created.Token).code == exitFailure
	})
	list = want(0, "token", "list", "--database-url", s.Config.DatabaseURL, "-o", "json")
	if !strings.Contains(list.stdout, `"revoked_at": "`) {
		t.Fatalf("direct token list:\n%s", list.stdout)
	}
	want(exitNotFound, "token", "revoke", "00000000-0000-0000-0000-000000000000", "--database-url", s.Config.DatabaseURL)
}

// TestServeRefusesOpenNetworkListen: with no token, serve refuses a non-loopback
// address unless --insecure; loopback is fine; a token lifts the refusal.
func TestServeRefusesOpenNetworkListen(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	for _, listen := range []string{":8080", "0.0.0.0:8080", "[::]:8080", "10.1.2.3:80", "example.com:80"} {
		if err := checkExposure(ctx, s.Server, listen, false, log); !errors.Is(err, errExposed) {
			t.Errorf("listen %s without tokens: %v, want refusal", listen, err)
		}
		if err := checkExposure(ctx, s.Server, listen, true, log); err != nil {
			t.Errorf("listen %s --insecure: %v", listen, err)
		}
	}
	for _, listen := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080", "127.0.0.2:9"} {
		if err := checkExposure(ctx, s.Server, listen, false, log); err != nil {
			t.Errorf("listen %s: %v", listen, err)
		}
	}
	if _, _, err := auth.Create(ctx, s.Server.Store, auth.Spec{Role: auth.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 3*time.Second, "serve accepting :8080 once a token exists", func() bool {
		return checkExposure(ctx, s.Server, ":8080", false, log) == nil
	})
}
