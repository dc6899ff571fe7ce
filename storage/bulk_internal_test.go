package storage

import (
	"testing"
	"time"
)

func TestRestAfterKeepsBulkOperationsToTheirDuty(t *testing.T) {
	for _, c := range []struct {
		worked time.Duration
		duty   float64
		want   time.Duration
	}{
		{40 * time.Millisecond, 0.5, 40 * time.Millisecond},
		{40 * time.Millisecond, 0.25, 120 * time.Millisecond},
		{30 * time.Millisecond, 0.75, 10 * time.Millisecond},
		{40 * time.Millisecond, 1, 0}, // back to back
		{0, 0.5, 0},
		{-time.Millisecond, 0.5, 0},
	} {
		if got := restAfter(c.worked, c.duty); got != c.want {
			t.Errorf("restAfter(%s, %g) = %s, want %s", c.worked, c.duty, got, c.want)
		}
	}
}

func TestWithBulkDutyKeepsTheDefaultForValuesOutOfRange(t *testing.T) {
	for _, c := range []struct {
		duty float64
		want float64
	}{{0.3, 0.3}, {1, 1}, {0, DefaultBulkDuty}, {-1, DefaultBulkDuty}, {1.5, DefaultBulkDuty}} {
		if got := New(nil, WithBulkDuty(c.duty)).bulkDuty; got != c.want {
			t.Errorf("WithBulkDuty(%g): duty %g, want %g", c.duty, got, c.want)
		}
	}
}
