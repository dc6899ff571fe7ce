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
// whose payload, result, progress, last error or attempt errors are plain or sealed with
// another key, in one short transaction. It returns how many tasks it changed and
// the last id it looked at: call it again from there until it changes none. Rows
// locked by a running statement are skipped and left for another pass.
func (s *Store) Reseal(ctx context.Context, after uuid.UUID, batch int) (int, uuid.UUID, error) {
	if s.sealer == nil {
		return 0, after, errors.New("reseal: no encryption keys configured")
	}
	last := after
	changed := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		prefix := "v1." + s.sealer.CurrentKey() + "."
		textPrefix := `{"taskforge_sealed":"` + prefix
		rows, err := tx.Query(ctx, unsealedTasks, prefix, after, batch, textPrefix)
		if err != nil {
			return err
		}
		type row struct {
			ID        uuid.UUID       `db:"id"`
			Queue     string          `db:"queue"`
			Payload   json.RawMessage `db:"payload"`
			Result    json.RawMessage `db:"result"`
			Progress  json.RawMessage `db:"progress"`
			LastError *string         `db:"last_error"`
		}
		found, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
		if err != nil || len(found) == 0 {
			return err
		}
		ids := make([]uuid.UUID, len(found))
		payloads := make([]string, len(found))
		results := make([]*string, len(found))
		lastErrors := make([]*string, len(found))
		progress := make([]*string, len(found))
		for i, r := range found {
			task := Task{ID: r.ID, Queue: r.Queue, Payload: r.Payload, Result: r.Result, LastError: r.LastError, Progress: r.Progress}
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
			if len(task.Progress) > 0 && string(task.Progress) != "null" {
				sealed, err := s.seal(r.ID.String(), sealer.Progress, task.Progress)
				if err != nil {
					return err
				}
				str := string(sealed)
				progress[i] = &str
			}
			if task.LastError != nil {
				text, err := s.sealError(r.ID, *task.LastError)
				if err != nil {
					return err
				}
				lastErrors[i] = &text
			}
			last = r.ID
		}
		var n int64
		if err := tx.QueryRow(ctx, resealTasks, ids, payloads, results, lastErrors, progress).Scan(&n); err != nil {
			return err
		}
		changed = int(n)
		return s.resealAttemptErrors(ctx, tx, ids, textPrefix)
	})
	if err != nil {
		return 0, after, fmt.Errorf("reseal tasks: %w", err)
	}
	return changed, last, nil
}

// resealAttemptErrors re-seals, within tx, the attempt errors of tasks not sealed
// with the current key (textPrefix as in unsealedTasks).
func (s *Store) resealAttemptErrors(ctx context.Context, tx pgx.Tx, tasks []uuid.UUID, textPrefix string) error {
	rows, err := tx.Query(ctx, unsealedAttemptErrors, tasks, textPrefix)
	if err != nil {
		return err
	}
	type row struct {
		TaskID  uuid.UUID `db:"task_id"`
		Attempt int       `db:"attempt"`
		Error   string    `db:"error"`
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
	if err != nil || len(found) == 0 {
		return err
	}
	ids, numbers, texts := make([]uuid.UUID, len(found)), make([]int32, len(found)), make([]string, len(found))
	for i, r := range found {
		text := r.Error
		if err := s.openError(r.TaskID, &text); err != nil {
			return fmt.Errorf("attempt %d of %s: %w", r.Attempt, r.TaskID, err)
		}
		if texts[i], err = s.sealError(r.TaskID, text); err != nil {
			return err
		}
		ids[i], numbers[i] = r.TaskID, int32(r.Attempt)
	}
	_, err = tx.Exec(ctx, resealAttemptErrors, ids, numbers, texts)
	return err
}
