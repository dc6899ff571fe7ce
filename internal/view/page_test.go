package view

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
)

// FuzzCursor: any text decodes to a cursor that round-trips, to nil (""), or to
// ErrBadCursor, never to another error or a panic.
func FuzzCursor(f *testing.F) {
	f.Add("")
	f.Add(*EncodeCursor(&storage.Cursor{}))
	f.Add("MjAyNi0wMS0wMVQwMDowMDowMFp8MDE5MGE0YTAtMDAwMC03MDAwLTgwMDAtMDAwMDAwMDAwMDAw")
	f.Add("' OR 1=1 --")
	f.Fuzz(func(t *testing.T, raw string) {
		cur, err := DecodeCursor(raw)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatalf("DecodeCursor(%q) = %v, want ErrBadCursor", raw, err)
			}
			return
		}
		if cur == nil {
			if raw != "" {
				t.Fatalf("DecodeCursor(%q) = nil, nil", raw)
			}
			return
		}
		again, err := DecodeCursor(*EncodeCursor(cur))
		if err != nil || !again.Time.Equal(cur.Time) || again.ID != cur.ID {
			t.Fatalf("cursor %q does not round-trip: %v, %v", raw, again, err)
		}
	})
}

// TestCursorRoundTrip: a cursor keeps its time to the nanosecond, in UTC, and its id.
func TestCursorRoundTrip(t *testing.T) {
	if EncodeCursor(nil) != nil {
		t.Fatal("EncodeCursor(nil) is not nil")
	}
	at := time.Date(2026, 12, 4, 7, 8, 9, 123456789, time.FixedZone("x", 3600))
	cur := &storage.Cursor{Time: at, ID: uuid.MustParse("0191e4a8-7b1c-7000-8000-000000000001")}
	got, err := DecodeCursor(*EncodeCursor(cur))
	if err != nil || !got.Time.Equal(at) || got.Time.Location() != time.UTC || got.ID != cur.ID {
		t.Fatalf("round trip of %+v = %+v, %v", cur, got, err)
	}
}

// TestParseTime: absent is nil; RFC 3339 with or without fractions parses; other
// text fails naming the parameter.
func TestParseTime(t *testing.T) {
	if got, err := ParseTime("since", ""); got != nil || err != nil {
		t.Fatalf(`ParseTime("") = %v, %v`, got, err)
	}
	for _, raw := range []string{"2026-12-04T07:00:00Z", "2026-12-04T07:00:00.5+01:00"} {
		if got, err := ParseTime("since", raw); got == nil || err != nil {
			t.Fatalf("ParseTime(%q) = %v, %v", raw, got, err)
		}
	}
	if _, err := ParseTime("since", "yesterday"); err == nil || err.Error() != "since must be an RFC 3339 time" {
		t.Fatalf("ParseTime(yesterday) = %v", err)
	}
}

// TestDeadKeepsDiedAtNull: died_at is present as null for a dead task without a
// finish time, and is the finish time otherwise.
func TestDeadKeepsDiedAtNull(t *testing.T) {
	d := Dead(storage.Task{ID: uuid.New(), Status: storage.StatusDead})
	if d.DiedAt != nil {
		t.Fatalf("DiedAt = %v, want nil", d.DiedAt)
	}
	at := time.Now()
	if d := Dead(storage.Task{ID: uuid.New(), FinishedAt: &at}); d.DiedAt == nil || !d.DiedAt.Equal(at) {
		t.Fatalf("DiedAt = %v, want %v", d.DiedAt, at)
	}
}
