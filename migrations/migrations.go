// Package migrations holds TaskForge's versioned schema and applies it.
//
// Each NNNN_name.sql file is one migration, embedded in the binary, applied in
// version order inside its own transaction and recorded in taskforge_migrations.
// Migrations are forward-only and must stay safe while replicas of the previous
// release still run. Apply serialises concurrent callers (replicas starting
// together) with a transaction-scoped PostgreSQL advisory lock, and holds no
// session state, so it also runs through PgBouncer in transaction mode.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed *.sql
var files embed.FS

// advisoryLockKey identifies TaskForge's migration lock ("tfmigrat" in ASCII).
const advisoryLockKey int64 = 0x74666d6967726174

// Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns every embedded migration in version order.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		prefix, rest, ok := strings.Cut(name, "_")
		if !ok || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migration %q: name must be NNNN_name.sql", name)
		}
		version, err := strconv.Atoi(prefix)
		if err != nil {
			return nil, fmt.Errorf("migration %q: bad version: %w", name, err)
		}
		body, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", name, err)
		}
		out = append(out, Migration{Version: version, Name: strings.TrimSuffix(rest, ".sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two migrations with version %d", out[i].Version)
		}
	}
	return out, nil
}

// Apply applies every migration not yet recorded and returns the versions it applied.
//
// Each migration runs in its own transaction that first takes a transaction-scoped
// advisory lock and re-reads the version table, so concurrent callers apply each
// migration exactly once. Apply keeps no session state (no session lock, no named
// prepared statement: every statement goes over the simple protocol), so pool may
// reach PostgreSQL through a pooler in transaction mode such as PgBouncer.
func Apply(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	// Under the lock too: two first replicas creating the table at once would collide.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lock(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS taskforge_migrations (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: create version table: %w", err)
	}
	// Read without the lock: on an up-to-date schema, the usual start, nothing waits.
	applied, err := appliedVersions(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied versions: %w", err)
	}

	var done []int
	for _, m := range all {
		if applied[m.Version] {
			continue
		}
		ran := false
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := lock(ctx, tx); err != nil {
				return err
			}
			// Another caller may have applied it while we waited for the lock.
			var exists bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM taskforge_migrations WHERE version = $1)",
				pgx.QueryExecModeSimpleProtocol, m.Version).Scan(&exists); err != nil || exists {
				return err
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO taskforge_migrations (version, name) VALUES ($1, $2)",
				pgx.QueryExecModeSimpleProtocol, m.Version, m.Name); err != nil {
				return err
			}
			ran = true
			return nil
		})
		if err != nil {
			return done, fmt.Errorf("migrate: apply %04d_%s: %w", m.Version, m.Name, err)
		}
		if ran {
			done = append(done, m.Version)
		}
	}
	return done, nil
}

// lock takes TaskForge's migration lock until tx ends. It conflicts with the session
// lock on the same key that earlier releases took, so mixed replicas still serialise.
func lock(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", advisoryLockKey)); err != nil {
		return fmt.Errorf("take advisory lock: %w", err)
	}
	return nil
}

// appliedVersions returns the versions recorded in taskforge_migrations.
func appliedVersions(ctx context.Context, pool *pgxpool.Pool) (map[int]bool, error) {
	rows, err := pool.Query(ctx, "SELECT version FROM taskforge_migrations", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil, err
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, err
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}
