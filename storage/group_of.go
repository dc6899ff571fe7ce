package storage

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

var groupsOfTasks = mustLoad("groups_of_tasks")

// GroupsOf returns the group of each of the tasks ids of queue ("" for the unnamed
// group), live or finished; ids no table holds are left out. It only reads.
func (s *Store) GroupsOf(ctx context.Context, queue string, ids []uuid.UUID) ([]GroupSlot, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, groupsOfTasks, queue, ids)
	if err != nil {
		return nil, fmt.Errorf("groups of %d tasks of %s: %w", len(ids), queue, err)
	}
	out := make([]GroupSlot, 0, len(ids))
	var id uuid.UUID
	var group *string
	_, err = pgx.ForEachRow(rows, []any{&id, &group}, func() error {
		slot := GroupSlot{ID: id}
		if group != nil {
			slot.Group = *group
		}
		out = append(out, slot)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("groups of %d tasks of %s: %w", len(ids), queue, err)
	}
	return out, nil
}
