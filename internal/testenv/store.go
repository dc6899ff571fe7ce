package testenv

import (
	"context"
	"testing"

	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/storage"
)

// NewStore returns a storage.Store on a fresh, migrated database (NewDatabase),
// with a hot-path pool as serve has (storage.WithHotPool), its pools closed at the
// end of the test.
func NewStore(tb testing.TB) *storage.Store {
	tb.Helper()
	ctx := context.Background()
	url := NewDatabase(tb)
	pool, err := storage.Connect(ctx, url, 8)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	if _, err := migrations.Apply(ctx, pool); err != nil {
		tb.Fatal(err)
	}
	hot, err := storage.Connect(ctx, url, 8, storage.HotPathSettings())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(hot.Close)
	return storage.New(pool, storage.WithHotPool(hot))
}
