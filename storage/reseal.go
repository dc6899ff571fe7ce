package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/sealer"
)

// Reseal re-encrypts, with the current key, up to batch tasks after the id after
// whose payload or result is plain or sealed with another key, in one short
// transaction. It returns how many it changed and the last id it looked at: call it
// again from there until it changes none. Rows locked by a running statement are
// skipped and left for another pass.
func (s *Store) Reseal(ctx context.Context, after uuid.UUID, batch int) (int, uuid.UUID, error) {
	if s.sealer == nil {
		return 0, after, errors.New("reseal: no encryption keys configured")
	}
	last := after
	changed := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		prefix := "v1." + s.sealer.CurrentKey() + "."
		rows, err := tx.Query(ctx, unsealedTasks, prefix, after, batch)
		if err != nil {
			return err
		}
		type row struct {
			ID      uuid.UUID       `db:"id"`
			Queue   string          `db:"queue"`
			Payload json.RawMessage `db:"payload"`
			Result  json.RawMessage `db:"result"`
		}
		found, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
		if err != nil {
			return err
		}
		ids := make([]uuid.UUID, len(found))
		payloads := make([]string, len(found))
		results := make([]*string, len(found))
		for i, r := range found {
			task := Task{ID: r.ID, Queue: r.Queue, Payload: r.Payload, Result: r.Result}
			if err := s.open(&task); err != nil {
				return err
			}
			payload, err := s.seal(r.Queue, sealer.Payload, task.Payload)
			if err != nil {
				return err
			}
			ids[i], payloads[i] = r.ID, string(payload)
			if len(task.Result) > 0 && string(task.Result) != "null" {
				result, err := s.seal(r.ID.String(), sealer.Result, task.Result)
				if err != nil {
					return err
				}
				str := string(result)
				results[i] = &str
			}
			last = r.ID
		}
		if len(found) == 0 {
			return nil
		}
		tag, err := tx.Exec(ctx, resealTasks, ids, payloads, results)
		changed = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, after, fmt.Errorf("reseal tasks: %w", err)
	}
	return changed, last, nil
}
