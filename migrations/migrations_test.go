package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/migrations"
	"github.com/taskforge/taskforge/storage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// applyConcurrently runs migrations.Apply from replicas pools at once against url
// and returns how many migrations they applied in all.
func applyConcurrently(t *testing.T, url string, replicas int) int {
	t.Helper()
	ctx := context.Background()
	applied := make([][]int, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := 0; i < replicas; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := storage.Connect(ctx, url, 2)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			applied[i], errs[i] = migrations.Apply(ctx, pool)
		}()
	}
	wg.Wait()
	total := 0
	for i := range applied {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		total += len(applied[i])
	}
	return total
}

func TestConcurrentApplyRunsEachMigrationOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.NewDatabase(t)
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if total := applyConcurrently(t, url, 4); total != len(all) {
		t.Fatalf("%d migrations applied across 4 concurrent replicas, want %d (each once)", total, len(all))
	}
	pool, err := storage.Connect(ctx, url, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	again, err := migrations.Apply(ctx, pool)
	if err != nil || len(again) != 0 {
		t.Fatalf("re-apply: %v %v", again, err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM taskforge_migrations").Scan(&n); err != nil || n != len(all) {
		t.Fatalf("recorded %d migrations (%v)", n, err)
	}
}

// TestMigrationsAreNumberedInOrder: versions start at 1 and increase. Gaps are
// allowed (a number can be reserved for a change that lands later): Apply goes by
// the versions recorded, not by a count.
func TestMigrationsAreNumberedInOrder(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range all {
		if (i == 0 && m.Version != 1) || (i > 0 && m.Version <= all[i-1].Version) || m.Name == "" || m.SQL == "" {
			t.Fatalf("migration %d: %+v", i, m.Version)
		}
	}
}

// TestApplyThroughPgBouncer: replicas whose pools reach PostgreSQL through PgBouncer
// in transaction mode apply each migration once, and leave no advisory lock behind
// on the server sessions they shared (a session lock would stay with whichever
// session took it, and block every later start).
func TestApplyThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.NewDatabase(t)
	bouncer := testenv.StartPgBouncer(t, url)
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if total := applyConcurrently(t, bouncer.URL, 3); total != len(all) {
		t.Fatalf("%d migrations applied across 3 replicas behind PgBouncer, want %d (each once)", total, len(all))
	}
	direct, err := storage.Connect(ctx, url, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	var locks int
	if err := direct.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
		WHERE l.locktype = 'advisory' AND d.datname = current_database()`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if locks != 0 {
		t.Fatalf("%d advisory locks still held after Apply returned", locks)
	}
}
