package storage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Groups of fair queues (migration 0025). A task's group is tasks.group_key; the
// counts of each named group are kept as the queues' are (tally.go): row triggers
// append every change of a grouped task's status to group_tally_delta in the
// changing statement's transaction, FoldGroupTally moves the deltas into
// group_tally, and readers add the deltas not folded yet. The figures are exact, and
// a read costs the rows of the groups it reads, never their tasks. The unnamed
// group (a NULL group_key) is not counted: it is the queue's own count.

// GroupCounts are one group's tasks by status.
type GroupCounts struct {
	Pending   int64 `json:"pending" db:"pending"`
	Blocked   int64 `json:"blocked" db:"blocked"`
	Claimed   int64 `json:"claimed" db:"claimed"` // buffered: dispatched, not yet taken by a worker
	Executing int64 `json:"executing" db:"executing"`
	Retry     int64 `json:"retry" db:"retry"`
	Dead      int64 `json:"dead" db:"dead"`
}

// Active reports whether the group has work waiting or running: pending, buffered
// or executing tasks.
func (c GroupCounts) Active() bool { return c.Pending+c.Claimed+c.Executing > 0 }

// FoldGroupTally moves up to limit of the oldest group count deltas into the
// totals, forgets the groups it brings back to 0, and returns how many deltas it
// moved. Any number of replicas may fold at once.
func (s *Store) FoldGroupTally(ctx context.Context, limit int) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var queues, groups []string
		if err := tx.QueryRow(ctx, foldGroupTally, limit).Scan(&n, &queues, &groups); err != nil {
			return err
		}
		if len(queues) == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, pruneGroupTally, queues, groups)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("fold group tally: %w", err)
	}
	return n, nil
}

// CountGroups returns the counts of those of groups of queue that have unfinished
// or dead tasks; the others are absent from the map.
func (s *Store) CountGroups(ctx context.Context, queue string, groups []string) (map[string]GroupCounts, error) {
	rows, err := s.pool.Query(ctx, groupCounts, queue, groups)
	if err != nil {
		return nil, fmt.Errorf("count groups of %s: %w", queue, err)
	}
	out := make(map[string]GroupCounts, len(groups))
	var g string
	var c GroupCounts
	_, err = pgx.ForEachRow(rows, []any{&g, &c.Pending, &c.Blocked, &c.Claimed, &c.Executing, &c.Retry, &c.Dead},
		func() error { out[g] = c; return nil })
	if err != nil {
		return nil, fmt.Errorf("count groups of %s: %w", queue, err)
	}
	return out, nil
}
