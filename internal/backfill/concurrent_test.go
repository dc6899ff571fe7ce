package backfill_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskforge/taskforge/internal/backfill"
	"github.com/taskforge/taskforge/storage"
)

// TestTwoMoversDropTheSameIndexes: two replicas' movers run at once on an upgraded
// database (migration 0027 left tasks' indexes of finished rows beside finished
// tasks). Both end well: every finished task moved once, and each index of finished
// rows dropped by one of them (DROP INDEX CONCURRENTLY IF EXISTS, the same index from
// two sessions), none left, none left invalid, no error. The drop alone is then raced
// again, from two stores, a few times over.
func TestTwoMoversDropTheSameIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := setup(t)
	for _, ddl := range finishedIndexes {
		exec(t, pool, ddl)
	}
	insertOldRelease(t, pool, 400)
	before := take(t, pool)
	other := storage.New(pool)

	var wg sync.WaitGroup
	progress := make([]backfill.Progress, 2)
	errs := make([]error, 2)
	for i, s := range []*storage.Store{store, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			progress[i], errs[i] = backfill.New(s, backfill.Config{BatchBlocks: 1}, quiet).MoveAll(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		// A mover whose whole pass found only rows the other held says so; a later
		// run (here, the next one) takes what is left.
		if err != nil && !errors.Is(err, backfill.ErrRowsHeld) {
			t.Fatalf("mover %d: %v", i, err)
		}
	}
	if errors.Is(errs[0], backfill.ErrRowsHeld) || errors.Is(errs[1], backfill.ErrRowsHeld) {
		p, err := backfill.New(store, backfill.Config{}, quiet).MoveAll(ctx)
		if err != nil {
			t.Fatalf("the run after a held pass: %v", err)
		}
		progress = append(progress, p)
	}
	// A mover whose partitions the other's were still making (the advisory lock
	// they share, bounded by LockTimeout) moves its rows into history's default
	// partitions; the janitor's next sweep moves them into their days, as here.
	if _, err := store.EnsureHistoryPartitions(ctx, 3); err != nil {
		t.Fatalf("the janitor's partitions: %v", err)
	}
	checkMoved(t, pool, before)
	var dropped []string
	for _, p := range progress {
		dropped = append(dropped, p.IndexesDropped...)
	}
	slices.Sort(dropped)
	if want := []string{"tasks_dead_idx", "tasks_finished_idx", "tasks_idempotency_idx"}; len(dropped) < len(want) {
		t.Errorf("the movers dropped %v between them, want at least %v", dropped, want)
	}
	checkNoFinishedIndex(t, pool)

	for round := range 5 {
		for _, ddl := range finishedIndexes {
			exec(t, pool, ddl)
		}
		errs := make([]error, 2)
		for i, s := range []*storage.Store{store, other} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.DropFinishedIndexes(ctx)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, store %d: %v", round, i, err)
			}
		}
		checkNoFinishedIndex(t, pool)
	}
}

// checkNoFinishedIndex fails t if tasks still has an index of finished rows, valid
// or not (pg_indexes lists an invalid one too).
func checkNoFinishedIndex(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if n := indexesLeft(t, pool); n != 0 {
		t.Errorf("%d of the indexes of finished tasks left", n)
	}
}
