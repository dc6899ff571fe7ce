package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/storage"
)

// NewStore returns a storage.Store on a fresh, migrated database (NewDatabase),
// with a hot-path pool as serve has (storage.WithHotPool), its pools closed at the
// end of the test.
func NewStore(tb testing.TB) *storage.Store {
	tb.Helper()
	url, pool := NewMigratedDatabase(tb)
	hot, err := storage.Connect(context.Background(), url, 8, storage.HotPathSettings())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(hot.Close)
	return storage.New(pool, storage.WithHotPool(hot))
}

// NewMigratedDatabase returns the URL of a fresh database (NewDatabase) with every
// migration applied, and a pool of up to 8 connections on it, closed at the end of
// the test: for tests that hand the URL to a command as well.
func NewMigratedDatabase(tb testing.TB) (string, *pgxpool.Pool) {
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
	return url, pool
}

// Claim gives workerID a lease on each of ids that is still claimable, as a poll
// would (storage.Store.ClaimMany), and returns the claimed tasks in the order of ids;
// ids that are no longer claimable are left out.
func Claim(ctx context.Context, s *storage.Store, ids []uuid.UUID, workerID string, lease time.Duration) ([]storage.Task, error) {
	items := make([]storage.ClaimItem, len(ids))
	for i, id := range ids {
		items[i] = storage.ClaimItem{TaskID: id, WorkerID: workerID}
	}
	byID, err := s.ClaimMany(ctx, items, lease)
	if err != nil {
		return nil, err
	}
	claimed := make([]storage.Task, 0, len(byID))
	for _, id := range ids {
		if t, ok := byID[id]; ok {
			claimed = append(claimed, t)
			delete(byID, id)
		}
	}
	return claimed, nil
}
