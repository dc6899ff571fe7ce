package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskforge/taskforge/sealer"
)

// sealPushSecret returns what to store for a queue's push secret: secret sealed
// (bound to the queue) when encryption is on, unless it is the stored value itself.
// No secret is kept without a push target.
func (s *Store) sealPushSecret(queue string, stored, secret *string) (*string, error) {
	if secret == nil || s.sealer == nil || (stored != nil && *stored == *secret) {
		return secret, nil
	}
	sealed, err := s.sealer.SealText(queue, sealer.PushSecret, *secret)
	if err != nil {
		return nil, fmt.Errorf("seal the push secret: %w", err)
	}
	return &sealed, nil
}

// pushColumn is the push target to store for q: nil for a pull queue, else its
// target with secret_set saying whether a secret is stored beside it.
func pushColumn(q Queue, secret *string) *PushTarget {
	if q.Push == nil {
		return nil
	}
	p := *q.Push
	p.SecretSet = secret != nil
	if p.Headers == nil {
		p.Headers = map[string]string{}
	}
	return &p
}

// PushQueues returns every queue with a push target, by name, with PushSecret
// opened: the plain secret, for signing requests. Only package push needs it.
func (s *Store) PushQueues(ctx context.Context) ([]Queue, error) {
	rows, err := s.pool.Query(ctx, pushQueues)
	if err != nil {
		return nil, fmt.Errorf("list push queues: %w", err)
	}
	qs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Queue])
	if err != nil {
		return nil, fmt.Errorf("list push queues: %w", err)
	}
	qs = s.resolvedAll(qs)
	for i, q := range qs {
		if q.PushSecret == nil || s.sealer == nil {
			continue
		}
		plain, err := s.sealer.OpenText(q.Name, sealer.PushSecret, *q.PushSecret)
		if err != nil {
			return nil, fmt.Errorf("push secret of queue %s: %w", q.Name, err)
		}
		qs[i].PushSecret = &plain
	}
	return qs, nil
}

// CancelRequested returns which of the executing tasks ids (each under the lease
// token at the same index of tokens) have a cancel requested.
func (s *Store) CancelRequested(ctx context.Context, ids, tokens []uuid.UUID) ([]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, cancelRequestedAmong, ids, tokens)
	if err != nil {
		return nil, fmt.Errorf("read cancel requests of %d tasks: %w", len(ids), err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("read cancel requests of %d tasks: %w", len(ids), err)
	}
	return out, nil
}

// PushAnswer is one finished attempt of a push queue, as the dashboard shows it.
type PushAnswer struct {
	TaskID     uuid.UUID `json:"task_id" db:"task_id"`
	Attempt    int       `json:"attempt" db:"attempt"`
	Status     string    `json:"status" db:"status"`
	FinishedAt time.Time `json:"finished_at" db:"finished_at"`
	// Answer is "ok" for a success, else the head of the attempt's error: the HTTP
	// status ("HTTP 503") or what went wrong ("push request timed out").
	Answer string  `json:"answer" db:"-"`
	Error  *string `json:"-" db:"error"`
}

// RecentPushAnswers returns the last n finished attempts of each of queues made by
// pushers, newest first, keyed by queue. It reads n rows per queue.
func (s *Store) RecentPushAnswers(ctx context.Context, queues []string, n int) (map[string][]PushAnswer, error) {
	out := make(map[string][]PushAnswer, len(queues))
	if len(queues) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, recentPushAnswers, queues, n)
	if err != nil {
		return nil, fmt.Errorf("recent push answers: %w", err)
	}
	type row struct {
		Queue string `db:"queue"`
		PushAnswer
	}
	rs, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
	if err != nil {
		return nil, fmt.Errorf("recent push answers: %w", err)
	}
	for _, r := range rs {
		a := r.PushAnswer
		if err := s.openError(a.TaskID, a.Error); err != nil {
			return nil, fmt.Errorf("recent push answers: task %s: %w", a.TaskID, err)
		}
		a.Answer = "ok"
		if a.Status != AttemptSucceeded {
			a.Answer = a.Status
			if a.Error != nil {
				head, _, _ := strings.Cut(*a.Error, ":")
				a.Answer = head
			}
		}
		out[r.Queue] = append(out[r.Queue], a)
	}
	return out, nil
}

// ResealPushSecrets re-encrypts, with the current key, every push secret that is
// plain or sealed with another key, in one transaction, and returns how many it
// changed.
func (s *Store) ResealPushSecrets(ctx context.Context) (int, error) {
	if s.sealer == nil {
		return 0, errors.New("reseal push secrets: no encryption keys configured")
	}
	changed := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, unsealedPushSecrets, `{"taskforge_sealed":"v1.`+s.sealer.CurrentKey()+".")
		if err != nil {
			return err
		}
		type row struct {
			Name   string `db:"name"`
			Secret string `db:"push_secret"`
		}
		found, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
		if err != nil {
			return err
		}
		for _, r := range found {
			plain, err := s.sealer.OpenText(r.Name, sealer.PushSecret, r.Secret)
			if err != nil {
				return fmt.Errorf("push secret of queue %s: %w", r.Name, err)
			}
			sealed, err := s.sealer.SealText(r.Name, sealer.PushSecret, plain)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, resealPushSecret, r.Name, sealed); err != nil {
				return err
			}
			changed++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("reseal push secrets: %w", err)
	}
	return changed, nil
}
