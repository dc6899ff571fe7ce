package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testenv"
)

// TestDeleteExpiredIdempotencyKeys: the janitor's batch deletes the reservations whose
// window has ended by the Store's clock, oldest first and at most the batch, and
// leaves the live keys and the reservations still running.
func TestDeleteExpiredIdempotencyKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := newStore(t)
	if _, err := base.Pool().Exec(ctx, `INSERT INTO idempotency_keys (queue, key, task_id, reserved_until)
		SELECT 'q', 'k' || i, gen_random_uuid(), CASE WHEN i <= 3 THEN now() + i * interval '1 hour' END
		FROM generate_series(1, 5) AS i`); err != nil {
		t.Fatal(err)
	}
	clock := &testenv.Clock{}
	s := testenv.Clocked(base, clock)
	left := func() int {
		var n int
		if err := base.Pool().QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n, err := s.DeleteExpiredIdempotencyKeys(ctx, 10); err != nil || n != 0 {
		t.Fatalf("now: deleted %d (%v), want 0", n, err)
	}
	clock.SetAhead(t, base, 150*time.Minute) // k1 and k2 have ended
	if n, err := s.DeleteExpiredIdempotencyKeys(ctx, 1); err != nil || n != 1 {
		t.Fatalf("batch of 1: deleted %d (%v)", n, err)
	}
	if n, err := s.DeleteExpiredIdempotencyKeys(ctx, 10); err != nil || n != 1 {
		t.Fatalf("the rest: deleted %d (%v), want 1", n, err)
	}
	if n := left(); n != 3 {
		t.Fatalf("%d keys left, want 3 (k3 reserved, k4 and k5 live)", n)
	}
}
