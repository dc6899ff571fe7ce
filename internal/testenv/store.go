package testenv

import (
	"context"
	"testing"

	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/storage"
)

// NewStore returns a storage.Store on a fresh, migrated database (NewDatabase), its
// pool closed at the end of the test.
func NewStore(tb testing.TB) *storage.Store {
	tb.Helper()
	ctx := context.Background()
	pool, err := storage.Connect(ctx, NewDatabase(tb), 8)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	if _, err := migrations.Apply(ctx, pool); err != nil {
		tb.Fatal(err)
	}
	return storage.New(pool)
}
