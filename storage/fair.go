package storage

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The statements of fair queues' dispatch and slot repair (fairness "round_robin").

// GroupPair is a (priority, group) pair of a fair queue that holds waiting tasks.
type GroupPair struct {
	Priority int
	Group    *string // nil: the unnamed group
}

// DueGroups returns the pairs of fair queue that hold waiting tasks: every level of
// the unnamed group, then up to limit named pairs in (priority, group) order after
// (afterPriority, afterGroup) (1 and "" from the first). Its cost follows the pairs
// it returns, whatever the backlog of each.
func (s *Store) DueGroups(ctx context.Context, queue string, afterPriority int, afterGroup string, limit int) ([]GroupPair, error) {
	rows, err := s.pool.Query(ctx, dueGroups, queue, afterPriority, afterGroup, limit)
	if err != nil {
		return nil, fmt.Errorf("groups with due work of %s: %w", queue, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (GroupPair, error) {
		var p GroupPair
		err := row.Scan(&p.Priority, &p.Group)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("groups with due work of %s: %w", queue, err)
	}
	return out, nil
}

// DispatchDueGrouped moves, for each pick, up to its N due pending or retry tasks of
// its group and priority in fair queue to buffered, oldest first, and returns them
// for mirroring into the group buffers. It runs on the hot pool (WithHotPool).
func (s *Store) DispatchDueGrouped(ctx context.Context, queue string, picks []GroupPick) ([]Buffered, error) {
	if len(picks) == 0 {
		return nil, nil
	}
	prios := make([]int32, len(picks))
	groups := make([]*string, len(picks))
	ns := make([]int64, len(picks))
	for i, p := range picks {
		prios[i], groups[i], ns[i] = int32(p.Priority), p.Group, int64(p.N)
	}
	// On the hot pool: the statement writes its count deltas itself (see its header),
	// two rows per group instead of the row triggers' two per task.
	rows, err := s.hot.Query(ctx, dispatchDueGrouped, queue, prios, groups, ns, s.now())
	if err != nil {
		return nil, fmt.Errorf("dispatch fair queue %s: %w", queue, err)
	}
	out, err := appendByPosition(nil, rows, bufferedColumnNames, appendBufferedFields)
	if err != nil {
		return nil, fmt.Errorf("dispatch fair queue %s: %w", queue, err)
	}
	return out, nil
}

// ExecutingInFairQueues returns, for every fair queue with a cap (the queue's, its
// groups' default or an override's), its executing tasks with their groups (empty
// for none), in one statement.
func (s *Store) ExecutingInFairQueues(ctx context.Context) (map[string][]GroupSlot, error) {
	rows, err := s.pool.Query(ctx, executingInFairQueues)
	if err != nil {
		return nil, fmt.Errorf("executing tasks of capped fair queues: %w", err)
	}
	out := map[string][]GroupSlot{}
	var queue, group string
	var id *uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&queue, &group, &id}, func() error {
		if id == nil { // a capped queue with nothing executing: its slots are all stale
			out[queue] = nil
			return nil
		}
		out[queue] = append(out[queue], GroupSlot{Group: group, ID: *id})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("executing tasks of capped fair queues: %w", err)
	}
	return out, nil
}

// ExecutingGroupSlots returns fair queue's executing tasks with their groups.
func (s *Store) ExecutingGroupSlots(ctx context.Context, queue string) ([]GroupSlot, error) {
	rows, err := s.pool.Query(ctx, executingGroupSlots, queue)
	if err != nil {
		return nil, fmt.Errorf("executing tasks of %s: %w", queue, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (GroupSlot, error) {
		var g GroupSlot
		err := row.Scan(&g.Group, &g.ID)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("executing tasks of %s: %w", queue, err)
	}
	return out, nil
}

// GroupOverrides returns every group override of the fair queues.
func (s *Store) GroupOverrides(ctx context.Context) ([]GroupOverride, error) {
	rows, err := s.pool.Query(ctx, groupOverrides)
	if err != nil {
		return nil, fmt.Errorf("group overrides: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[GroupOverride])
	if err != nil {
		return nil, fmt.Errorf("group overrides: %w", err)
	}
	return out, nil
}
