package storage_test

import (
	"context"
	"github.com/jackc/pgx/v5"
	"slices"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/storage"
)

// TestStatementColumns: every statement PREPAREs on a migrated database, takes as
// many parameters as its header documents, and returns the columns its header
// names: those that return task rows, the task columns in scan order.
func TestStatementColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.NewStore(t)
	conn, err := store.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for name, sql := range storage.Statements {
		desc, err := conn.Conn().Prepare(ctx, "", sql)
		if err != nil {
			t.Errorf("%s does not prepare: %v", name, err)
			continue
		}
		file := storage.StatementFile(name)
		if n := strings.Count(file, "\n--   $"); n != len(desc.ParamOIDs) {
			t.Errorf("%s takes %d parameters; its header documents %d", name, len(desc.ParamOIDs), n)
		}
		var got []string
		for _, f := range desc.Fields {
			got = append(got, f.Name)
		}
		if want := documentedColumns(t, name, file); !slices.Equal(got, want) {
			t.Errorf("%s returns %v; its header says %v", name, got, want)
		}
	}
}

// documentedColumns reads the "-- Returns:" paragraph of a statement's header.
func documentedColumns(t *testing.T, name, file string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(file, "\n-- Returns: ")
	if !ok {
		t.Fatalf("%s: no Returns line", name)
	}
	var text strings.Builder
	for i, line := range strings.Split(rest, "\n") {
		if i > 0 {
			cont, ok := strings.CutPrefix(line, "--   ")
			if !ok || strings.HasPrefix(cont, "$") {
				break
			}
			line = cont
		}
		text.WriteString(" " + line)
	}
	ret := strings.TrimSpace(text.String())
	const taskRow = "every column of the task row (as get_task)"
	switch {
	case ret == "no rows.":
		return nil
	case strings.HasPrefix(ret, taskRow):
		cols := slices.Clone(storage.TaskColumnNames)
		if extra, ok := strings.CutPrefix(strings.TrimSuffix(ret, "."), taskRow+", then "); ok {
			cols = append(cols, strings.Split(extra, ", ")...)
		}
		return cols
	}
	ret, _, _ = strings.Cut(strings.TrimSuffix(ret, "."), " (")
	return strings.Split(ret, ", ")
}

// TestCreateDatabase: a name that needs quoting is created as given, and a second
// call finds it and changes nothing.
func TestCreateDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := testenv.PostgresURL(t)
	name := `TaskForge "odd" ` + strings.ReplaceAll(t.Name(), "/", "_")
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	drop := func() {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	drop()
	defer drop()
	for range 2 {
		if err := storage.CreateDatabase(ctx, admin, name); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil || n != 1 {
		t.Fatalf("databases named %q: %d (%v), want 1", name, n, err)
	}
}
