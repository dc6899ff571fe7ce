package migrations_test

import (
	"context"
	"math"
	"testing"

	"github.com/taskforge/taskforge/internal/testenv"
)

// nextStatus is the reference decision (DESIGN §2): a requested cancel ends the
// task cancelled; a failure that is not retryable, or one past the budget
// (max_retries retries after the first attempt, released attempts not counted),
// ends it dead; any other failure retries.
func nextStatus(attempts, releases, maxRetries int, cancelRequested, retryable bool) string {
	switch {
	case cancelRequested:
		return "cancelled"
	case !retryable || attempts-releases > maxRetries:
		return "dead"
	}
	return "retry"
}

// backoffBounds are the least and greatest delay, in ms, after failed attempt n:
// min(base * 2^(n-1) + rand(0, base), max).
func backoffBounds(n int, base, max int64) (lo, hi float64) {
	exp := float64(base) * math.Pow(2, float64(n-1))
	return math.Min(exp, float64(max)), math.Min(exp+float64(base), float64(max))
}

// TestRetryRule: the SQL functions that nack_task and reclaim_expired decide with
// (migration 0016) agree with the reference decision on a table of cases.
func TestRetryRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.NewStore(t).Pool()
	for _, c := range []struct {
		attempts, releases, maxRetries int
		cancel, retryable              bool
	}{
		{1, 0, 3, false, true}, {3, 0, 3, false, true}, {4, 0, 3, false, true}, {5, 0, 3, false, true},
		{4, 1, 3, false, true}, {5, 1, 3, false, true}, {1, 0, 0, false, true}, {2, 0, 0, false, true},
		{1, 0, 3, false, false}, {1, 0, 3, true, true}, {9, 0, 3, true, false}, {101, 0, 100, false, true},
		{3, 3, 0, false, true}, {4, 3, 0, false, true},
	} {
		var got string
		if err := pool.QueryRow(ctx, `SELECT taskforge_next_status($1, $2, $3, $4, $5)`,
			c.attempts, c.releases, c.maxRetries, c.cancel, c.retryable).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := nextStatus(c.attempts, c.releases, c.maxRetries, c.cancel, c.retryable); got != want {
			t.Errorf("%+v: taskforge_next_status says %s, the reference %s", c, got, want)
		}
	}
	for _, c := range []struct {
		n         int
		base, max int64
	}{
		{1, 1000, 3_600_000}, {2, 1000, 3_600_000}, {5, 1000, 3_600_000}, {13, 1000, 3_600_000},
		{30, 1000, 3_600_000}, {1, 0, 3_600_000}, {3, 50, 120}, {1, 10, 0},
	} {
		lo, hi := backoffBounds(c.n, c.base, c.max)
		// Fifty draws: the jitter stays in range, and varies when it can.
		var least, most float64 = math.Inf(1), math.Inf(-1)
		rows, err := pool.Query(ctx, `SELECT taskforge_backoff_ms($1, $2, $3) FROM generate_series(1, 50)`, c.n, c.base, c.max)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var d float64
			if err := rows.Scan(&d); err != nil {
				t.Fatal(err)
			}
			if d < lo || d > hi || d != math.Floor(d) {
				t.Errorf("%+v: taskforge_backoff_ms gave %v, outside [%v, %v] or not whole", c, d, lo, hi)
			}
			least, most = math.Min(least, d), math.Max(most, d)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if hi-lo >= 10 && least == most {
			t.Errorf("%+v: fifty draws all gave %v: no jitter", c, least)
		}
	}
}
