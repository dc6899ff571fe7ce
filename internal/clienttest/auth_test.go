package clienttest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/testserver"
)

// TestWithToken: a Client with a token authenticates; without one it gets
// ErrUnauthorized, and with the wrong role ErrForbidden; tokens can be managed
// through the SDK.
func TestWithToken(t *testing.T) {
	t.Parallel()
	s, anon := setup(t, nil)
	ctx := context.Background()
	secret, _, err := auth.Create(ctx, s.Server.Store, auth.Spec{Role: auth.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(s.URL, client.WithToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 3*time.Second, "anonymous calls refused", func() bool {
		_, err := anon.ListQueues(ctx)
		return errors.Is(err, client.ErrUnauthorized)
	})
	if _, err := admin.ListQueues(ctx); err != nil {
		t.Fatal(err)
	}
	created, err := admin.CreateToken(ctx, client.TokenSpec{Role: "producer", Name: "sdk", ExpiresIn: time.Hour})
	if err != nil || created.Secret == "" || created.ExpiresAt == nil {
		t.Fatalf("create token: %+v, %v", created, err)
	}
	producer, _ := client.New(s.URL, client.WithToken(created.Secret))
	if _, err := producer.ListWorkers(ctx); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("producer listing workers: %v, want ErrForbidden", err)
	}
	ts, err := admin.ListTokens(ctx)
	if err != nil || len(ts) != 2 {
		t.Fatalf("list tokens: %+v, %v", ts, err)
	}
	if err := admin.RevokeToken(ctx, created.ID); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 3*time.Second, "revoked token refused", func() bool {
		_, err := producer.ListQueues(ctx)
		return errors.Is(err, client.ErrUnauthorized)
	})
}
