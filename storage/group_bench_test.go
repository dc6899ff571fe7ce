package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskforge/taskforge/storage"
)

// BenchmarkListActiveGroups: GET /queues/:name/groups?active=true's read with
// 100,000 active groups (one pending task each, counted by the row triggers and
// folded) beside 100,000 groups whose tasks are done, and 1,000 deltas not folded
// yet: a page of 500 from the start, and one from the middle. §11 asks under 50 ms.
func BenchmarkListActiveGroups(b *testing.B) {
	ctx := context.Background()
	s := newStore(b)
	pool := s.Pool()
	start := time.Now()
	for _, stmt := range []string{
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, group_key)
			SELECT gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3, 'tenant-' || lpad(g::text, 6, '0')
			FROM generate_series(1, 100000) AS g`,
		`INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, group_key, finished_at)
			SELECT gen_random_uuid(), 'q', '{}', 5, 'done', now(), 3, 'idle-' || lpad(g::text, 6, '0'), now()
			FROM generate_series(1, 100000) AS g`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			b.Fatal(err)
		}
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
	if _, err := pool.Exec(ctx, `INSERT INTO tasks (id, queue, payload, priority, status, scheduled_at, max_retries, group_key)
		SELECT gen_random_uuid(), 'q', '{}', 5, 'pending', now(), 3, 'tenant-' || lpad((g * 97)::text, 6, '0')
		FROM generate_series(1, 1000) AS g`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE group_tally, group_tally_delta`); err != nil {
		b.Fatal(err)
	}
	b.Logf("setup %v", time.Since(start))
	for _, c := range []struct{ name, after string }{{"first_page", ""}, {"middle_page", "tenant-050000"}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				groups, _, more, err := s.ListGroups(ctx, "q", c.after, 500, true)
				if err != nil || len(groups) != 500 || !more {
					b.Fatalf("%d groups, more %v, %v", len(groups), more, err)
				}
				if g := groups[0]; g.Counts != (storage.GroupCounts{Pending: g.Counts.Pending}) || g.Counts.Pending < 1 {
					b.Fatalf("first group %+v", g)
				}
			}
		})
	}
}
