package storage

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
)

var busyGroups = mustLoad("busy_groups")

// BusyPosition is where a busiest-first listing of groups continues: after the
// group Name with Busy pending, claimed and executing tasks. The zero value starts
// from the busiest.
type BusyPosition struct {
	Busy int64
	Name string
}

// BusiestGroups returns a page of up to limit of queue's groups with unfinished or
// dead tasks, busiest first (pending + claimed + executing tasks, as last folded:
// about a second behind), then by name, after from (nil from the start); each with
// its exact counts and overrides. next is the position after the page, nil on the
// last one. A page costs its own length however many groups the queue has. It
// returns ErrQueueNotFound without the queue.
func (s *Store) BusiestGroups(ctx context.Context, queue string, from *BusyPosition, limit int) (groups []Group, next *BusyPosition, err error) {
	negBusy, after := int64(math.MinInt64), ""
	if from != nil {
		negBusy, after = -from.Busy, from.Name
	}
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, busyGroups, queue, negBusy, after, limit+1)
		if err != nil {
			return err
		}
		var page []BusyPosition
		var p BusyPosition
		if _, err := pgx.ForEachRow(rows, []any{&p.Name, &p.Busy}, func() error { page = append(page, p); return nil }); err != nil {
			return err
		}
		if len(page) > limit {
			page = page[:limit]
			last := page[limit-1]
			next = &last
		}
		names := make([]string, len(page))
		for i, p := range page {
			names[i] = p.Name
		}
		groups, err = readGroups(ctx, tx, queue, names, false)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list busiest groups of %s: %w", queue, err)
	}
	return groups, next, nil
}
