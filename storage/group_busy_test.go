package storage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/taskforge/taskforge/storage"
)

// TestBusiestGroups: a queue's groups come busiest first (pending + claimed +
// executing, as folded), then by name, a page at a time; each with its exact counts
// and overrides, a group with only dead tasks last. A queue that does not exist is
// ErrQueueNotFound.
func TestBusiestGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	pool := s.Pool()
	for _, stmt := range []string{
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, group_key)
			SELECT gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3, g
			FROM unnest('{b,a,a,a,c,c,c}'::text[]) AS g`,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, group_key, finished_at)
			VALUES (gen_random_uuid(), 'q', '{}', 5, 'dead', now(), 3, 'd', now())`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.FoldGroupTally(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	w := 2
	if _, err := s.PutGroup(ctx, "q", "c", storage.GroupSettings{Weight: &w}); err != nil {
		t.Fatal(err)
	}
	// A delta not folded yet: b's exact count shows it, its place does not yet.
	if _, err := pool.Exec(ctx, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, group_key)
		VALUES (gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3, 'b')`); err != nil {
		t.Fatal(err)
	}

	page, next, err := s.BusiestGroups(ctx, "q", nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 2 || page[0].Name != "a" || page[1].Name != "c" || page[0].Counts.Pending != 3 ||
		page[1].Settings.Weight == nil || *page[1].Settings.Weight != 2 {
		t.Fatalf("first page: %+v", page)
	}
	if next == nil || *next != (storage.BusyPosition{Busy: 3, Name: "c"}) {
		t.Fatalf("next after the first page: %+v", next)
	}
	page, next, err = s.BusiestGroups(ctx, "q", next, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 2 || page[0].Name != "b" || page[0].Counts.Pending != 2 || page[1].Name != "d" || page[1].Counts.Dead != 1 || next != nil {
		t.Fatalf("second page: %+v, next %+v", page, next)
	}
	if _, _, err := s.BusiestGroups(ctx, "nope", nil, 2); !errors.Is(err, storage.ErrQueueNotFound) {
		t.Fatalf("a queue that does not exist: %v", err)
	}
}

// BenchmarkBusiestGroups: the dashboard's busiest-first page of 50 with 100,000
// groups of one to three pending tasks, from the start and from the middle.
func BenchmarkBusiestGroups(b *testing.B) {
	ctx := context.Background()
	s := newStore(b)
	pool := s.Pool()
	if _, err := pool.Exec(ctx, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, group_key)
		SELECT gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3, 'tenant-' || lpad(g::text, 6, '0')
		FROM generate_series(1, 100000) AS g, generate_series(1, 1 + g % 3) AS n`); err != nil {
		b.Fatal(err)
	}
	for {
		n, err := s.FoldGroupTally(ctx, 50_000)
		if err != nil {
			b.Fatal(err)
		}
		if n < 50_000 {
			break
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE group_tally, group_tally_delta`); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		from *storage.BusyPosition
	}{{"first_page", nil}, {"middle_page", &storage.BusyPosition{Busy: 2, Name: "tenant-050000"}}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				groups, next, err := s.BusiestGroups(ctx, "q", c.from, 50)
				if err != nil || len(groups) != 50 || next == nil {
					b.Fatalf("%d groups, next %v, %v", len(groups), next, err)
				}
			}
		})
	}
}
