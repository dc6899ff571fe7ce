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
	out, err := countGroups(ctx, s.pool, queue, groups)
	if err != nil {
		return nil, fmt.Errorf("count groups of %s: %w", queue, err)
	}
	return out, nil
}

func countGroups(ctx context.Context, q querier, queue string, groups []string) (map[string]GroupCounts, error) {
	rows, err := q.Query(ctx, groupCounts, queue, groups)
	if err != nil {
		return nil, err
	}
	out := make(map[string]GroupCounts, len(groups))
	var g string
	var c GroupCounts
	_, err = pgx.ForEachRow(rows, []any{&g, &c.Pending, &c.Blocked, &c.Claimed, &c.Executing, &c.Retry, &c.Dead},
		func() error { out[g] = c; return nil })
	return out, err
}

// GroupSettings are one group's overrides of its queue's group defaults; nil keeps
// the queue's default (weight: 1).
type GroupSettings struct {
	Weight         *int     `json:"weight" db:"weight"` // turns per round, 1..1000
	MaxConcurrency *int     `json:"max_concurrency" db:"max_concurrency"`
	RateLimit      *float64 `json:"rate_limit" db:"rate_limit"`
	RateBurst      *int     `json:"rate_burst" db:"rate_burst"`
}

// Group is one group of a queue: its overrides and its tasks by status.
type Group struct {
	Name     string
	Settings GroupSettings
	Counts   GroupCounts
}

// groupRow is a row of group_settings.
type groupRow struct {
	Name string `db:"group_key"`
	GroupSettings
}

// PutGroup replaces the overrides of group of queue and returns the group. It
// returns ErrQueueNotFound when there is no such queue.
func (s *Store) PutGroup(ctx context.Context, queue, group string, set GroupSettings) (Group, error) {
	rows, err := s.pool.Query(ctx, putGroup, queue, group, set.Weight, set.MaxConcurrency, set.RateLimit, set.RateBurst)
	row, err := one[groupRow](rows, err, ErrQueueNotFound)
	if err != nil {
		if isForeignKeyViolation(err) {
			err = ErrQueueNotFound
		}
		return Group{}, fmt.Errorf("put group %q of %s: %w", group, queue, err)
	}
	counts, err := s.CountGroups(ctx, queue, []string{group})
	if err != nil {
		return Group{}, err
	}
	return Group{Name: group, Settings: row.GroupSettings, Counts: counts[group]}, nil
}

// GetGroup returns group of queue. It returns ErrQueueNotFound without the queue,
// and ErrGroupNotFound when the group has neither overrides nor unfinished or dead
// tasks.
func (s *Store) GetGroup(ctx context.Context, queue, group string) (Group, error) {
	var out []Group
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var err error
		out, err = readGroups(ctx, tx, queue, []string{group}, false)
		return err
	})
	if err == nil && len(out) == 0 {
		err = ErrGroupNotFound
	}
	if err != nil {
		return Group{}, fmt.Errorf("get group %q of %s: %w", group, queue, err)
	}
	return out[0], nil
}

// DeleteGroup forgets the overrides of group of queue; its tasks stay. It returns
// ErrQueueNotFound without the queue, and ErrGroupNotFound when the group had no
// overrides and has no unfinished or dead tasks.
func (s *Store) DeleteGroup(ctx context.Context, queue, group string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, queueExists, queue).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return ErrQueueNotFound
		}
		tag, err := tx.Exec(ctx, deleteGroup, queue, group)
		if err != nil || tag.RowsAffected() > 0 {
			return err
		}
		counts, err := countGroups(ctx, tx, queue, []string{group})
		if err == nil && len(counts) == 0 {
			err = ErrGroupNotFound
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete group %q of %s: %w", group, queue, err)
	}
	return nil
}

// ListGroups returns a page of queue's groups in name order after the name after
// ("" from the start): the groups with overrides or unfinished or dead tasks, or,
// when active, those with pending, buffered or executing tasks. more says whether
// another page may follow (continue after the last name returned, or after last
// when the page is empty). A page may hold fewer than limit groups when groups
// emptied since their counts were last folded. ErrQueueNotFound without the queue.
func (s *Store) ListGroups(ctx context.Context, queue, after string, limit int, active bool) (groups []Group, last string, more bool, err error) {
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, listGroupNames, queue, after, limit+1, active)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if more = len(names) > limit; more {
			names = names[:limit]
		}
		if len(names) > 0 {
			last = names[len(names)-1]
		}
		groups, err = readGroups(ctx, tx, queue, names, active)
		return err
	})
	if err != nil {
		return nil, "", false, fmt.Errorf("list groups of %s: %w", queue, err)
	}
	return groups, last, more, nil
}

// readGroups reads the groups among names of queue that have overrides or
// unfinished or dead tasks (active: pending, buffered or executing tasks), in the
// order of names. ErrQueueNotFound without the queue.
func readGroups(ctx context.Context, tx pgx.Tx, queue string, names []string, active bool) ([]Group, error) {
	var ok bool
	if err := tx.QueryRow(ctx, queueExists, queue).Scan(&ok); err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrQueueNotFound
	}
	if len(names) == 0 {
		return nil, nil
	}
	counts, err := countGroups(ctx, tx, queue, names)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, groupSettings, queue, names)
	if err != nil {
		return nil, err
	}
	settings, err := pgx.CollectRows(rows, pgx.RowToStructByName[groupRow])
	if err != nil {
		return nil, err
	}
	set := make(map[string]GroupSettings, len(settings))
	for _, r := range settings {
		set[r.Name] = r.GroupSettings
	}
	out := make([]Group, 0, len(names))
	for _, n := range names {
		c, counted := counts[n]
		st, overridden := set[n]
		if (active && !c.Active()) || (!active && !counted && !overridden) {
			continue
		}
		out = append(out, Group{Name: n, Settings: st, Counts: c})
	}
	return out, nil
}
