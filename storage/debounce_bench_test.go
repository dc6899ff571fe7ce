package storage_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
)

// BenchmarkEnqueueDebounce compares, in one run on one database, a single-task
// enqueue without a debounce key (due now, or scheduled a minute ahead as a
// debounced task is) with one that carries a key: a new key each time (the
// statement inserts) and one key throughout (it replaces the waiting task).
// TASKFORGE_BENCH_ROUNDS (default 1) interleaves that many rounds of the four (-count
// would run each one's repeats back to back); docs/benchmarks.md has the figures.
func BenchmarkEnqueueDebounce(b *testing.B) {
	s := newStore(b)
	payload := json.RawMessage(`{"n":1}`)
	later := time.Now().Add(time.Hour)
	n := 0
	rounds := 1
	if v, err := strconv.Atoi(os.Getenv("TASKFORGE_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	for range rounds {
		benchDebounceRound(b, s, payload, later, &n)
	}
}

// benchDebounceRound is one round of BenchmarkEnqueueDebounce's four cases.
func benchDebounceRound(b *testing.B, s *storage.Store, payload json.RawMessage, later time.Time, n *int) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		task func() storage.NewTask
	}{
		{"plain", func() storage.NewTask {
			return storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: payload, Priority: 5}
		}},
		{"plain-scheduled", func() storage.NewTask {
			return storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: payload, Priority: 5, ScheduledAt: &later}
		}},
		{"debounce-new-key", func() storage.NewTask {
			*n++
			key := "k" + strconv.Itoa(*n)
			return storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: payload, Priority: 5, DebounceKey: &key,
				DebounceMs: 60_000}
		}},
		{"debounce-same-key", func() storage.NewTask {
			key := "same"
			return storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: payload, Priority: 5, DebounceKey: &key,
				DebounceMs: 60_000}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Enqueue(ctx, "q", []storage.NewTask{c.task()}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEnqueueReservedKeys compares, in one run, enqueues into a database whose
// idempotency_keys holds TASKFORGE_BENCH_RESERVED_KEYS (default 1,000,000) keys
// reserved past their tasks' deletion with enqueues into one that holds none: with a
// fresh idempotency key each (the path that writes idempotency_keys), and without
// one. The keys are loaded once; TASKFORGE_BENCH_ROUNDS (default 1) interleaves that
// many rounds of the four (the second and later named "#01", "#02", ...), as -count
// would without loading the keys again each time.
func BenchmarkEnqueueReservedKeys(b *testing.B) {
	ctx := context.Background()
	reserved := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("TASKFORGE_BENCH_RESERVED_KEYS")); err == nil {
		reserved = v
	}
	rounds := 1
	if v, err := strconv.Atoi(os.Getenv("TASKFORGE_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	empty, full := newStore(b), newStore(b)
	start := time.Now()
	if _, err := full.Pool().Exec(ctx, `INSERT INTO idempotency_keys (queue, key, task_id, fingerprint, created_at, reserved_until)
		SELECT 'q', 'reserved-' || i, gen_random_uuid(), '\x00'::bytea, now(), now() + interval '1 day'
		FROM generate_series(1, $1) AS i`, reserved); err != nil {
		b.Fatal(err)
	}
	if _, err := full.Pool().Exec(ctx, `VACUUM ANALYZE idempotency_keys`); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d reserved keys written in %s", reserved, time.Since(start).Round(time.Millisecond))
	payload := json.RawMessage(`{"n":1}`)
	n := 0
	for range rounds {
		for _, c := range []struct {
			name  string
			store *storage.Store
			key   bool
		}{{"keyed/none", empty, true}, {"keyed/reserved", full, true}, {"plain/none", empty, false}, {"plain/reserved", full, false}} {
			b.Run(c.name, func(b *testing.B) {
				for b.Loop() {
					t := storage.NewTask{ID: uuid.Must(uuid.NewV7()), Payload: payload, Priority: 5}
					if c.key {
						n++
						k := "fresh-" + strconv.Itoa(n)
						t.IdempotencyKey, t.Fingerprint = &k, []byte(k)
					}
					if _, err := c.store.Enqueue(ctx, "q", []storage.NewTask{t}, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
