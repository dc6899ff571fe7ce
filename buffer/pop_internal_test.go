package buffer

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestParsePop: a well-formed reply is read field by field; a reply that is short,
// odd or holds a field of the wrong type is refused with an error naming the field,
// never read as zeros.
func TestParsePop(t *testing.T) {
	id := uuid.MustParse("0191e4a8-7b1c-7000-8000-000000000001")
	for _, tc := range []struct {
		name    string
		reply   []any
		want    Popped
		wantErr string
	}{
		{name: "empty pop", reply: []any{int64(0), int64(0), int64(1700000000000000), int64(0)},
			want: Popped{RedisTimeUs: 1700000000000000}},
		{name: "one entry", reply: []any{int64(0), int64(0), int64(5), int64(2), id.String(), "1.5"},
			want: Popped{RedisTimeUs: 5, Remaining: 2, Entries: []Entry{{ID: id, Score: 1.5}}}},
		{name: "paused", reply: []any{int64(1), int64(0), int64(5), int64(7)},
			want: Popped{Paused: true, RedisTimeUs: 5, Remaining: 7}},
		{name: "need sync", reply: []any{int64(2), int64(0), int64(5), int64(0)},
			want: Popped{NeedSync: true, RedisTimeUs: 5}},
		{name: "at cap", reply: []any{int64(3), int64(0), int64(5), int64(0)},
			want: Popped{AtCap: true, RedisTimeUs: 5}},
		{name: "out of tokens", reply: []any{int64(0), int64(250), int64(5), int64(3)},
			want: Popped{RetryAfter: 250 * time.Millisecond, RedisTimeUs: 5, Remaining: 3}},
		{name: "foreign member dropped", reply: []any{int64(0), int64(0), int64(5), int64(0), "not-a-uuid", "1"},
			want: Popped{RedisTimeUs: 5}},

		{name: "nil", reply: nil, wantErr: "reply of 0 fields"},
		{name: "short", reply: []any{int64(0), int64(0), int64(5)}, wantErr: "reply of 3 fields"},
		{name: "odd pairs", reply: []any{int64(0), int64(0), int64(5), int64(0), id.String()}, wantErr: "reply of 5 fields"},
		{name: "status a string", reply: []any{"0", int64(0), int64(5), int64(0)}, wantErr: "status is string"},
		{name: "retry a float", reply: []any{int64(0), 1.5, int64(5), int64(0)}, wantErr: "retry_after_ms is float64"},
		{name: "time nil", reply: []any{int64(0), int64(0), nil, int64(0)}, wantErr: "now_us is <nil>"},
		{name: "remaining a string", reply: []any{int64(0), int64(0), int64(5), "3"}, wantErr: "remaining is string"},
		{name: "unknown status", reply: []any{int64(9), int64(0), int64(5), int64(0)}, wantErr: "status 9"},
		{name: "member an integer", reply: []any{int64(0), int64(0), int64(5), int64(1), int64(42), "1"}, wantErr: "member 0 is int64"},
		{name: "score an integer", reply: []any{int64(0), int64(0), int64(5), int64(1), id.String(), int64(1)}, wantErr: "score of " + id.String() + " is int64"},
		{name: "score not a number", reply: []any{int64(0), int64(0), int64(5), int64(1), id.String(), "high"}, wantErr: "score of " + id.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePop(tc.reply)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parsePop(%v) = %+v, %v; want an error containing %q", tc.reply, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parsePop(%v): %v", tc.reply, err)
			}
			if got.Paused != tc.want.Paused || got.NeedSync != tc.want.NeedSync || got.AtCap != tc.want.AtCap ||
				got.RetryAfter != tc.want.RetryAfter || got.RedisTimeUs != tc.want.RedisTimeUs ||
				got.Remaining != tc.want.Remaining || len(got.Entries) != len(tc.want.Entries) {
				t.Fatalf("parsePop(%v) = %+v, want %+v", tc.reply, got, tc.want)
			}
			for i := range got.Entries {
				if got.Entries[i] != tc.want.Entries[i] {
					t.Fatalf("entry %d = %+v, want %+v", i, got.Entries[i], tc.want.Entries[i])
				}
			}
		})
	}
}

// TestParseFairPop: the fair reply is read field by field; a malformed one is refused.
func TestParseFairPop(t *testing.T) {
	id := uuid.MustParse("0191e4a8-7b1c-7000-8000-000000000001")
	got, err := parseFairPop([]any{int64(0), int64(40), int64(5), int64(3), int64(2), int64(1), int64(1), id.String(), "1.5", "tenant:1", "nope", "2", "g"})
	if err != nil {
		t.Fatal(err)
	}
	if got.RetryAfter != 40*time.Millisecond || got.Remaining != 3 || got.CapParked != 2 || got.RateParked != 1 || !got.CapOverrides ||
		len(got.Entries) != 1 || got.Entries[0].ID != id || got.Entries[0].Group != "tenant:1" || got.Entries[0].Score != 1.5 {
		t.Fatalf("parseFairPop = %+v", got)
	}
	for _, tc := range []struct {
		reply   []any
		wantErr string
	}{
		{[]any{int64(0), int64(0), int64(5), int64(0), int64(0), int64(0)}, "reply of 6 fields"},
		{[]any{int64(0), int64(0), int64(5), int64(0), int64(0), int64(0), int64(0), id.String(), "1"}, "reply of 9 fields"},
		{[]any{int64(0), int64(0), int64(5), int64(0), "0", int64(0), int64(0)}, "cap_parked is string"},
		{[]any{int64(0), int64(0), int64(5), int64(0), int64(0), int64(0), "1"}, "cap_overrides is string"},
		{[]any{int64(4), int64(0), int64(5), int64(0), int64(0), int64(0), int64(0)}, "status 4"},
		{[]any{int64(0), int64(0), int64(5), int64(1), int64(0), int64(0), int64(0), id.String(), "1", int64(7)}, "want three strings"},
		{[]any{int64(0), int64(0), int64(5), int64(1), int64(0), int64(0), int64(0), id.String(), "x", "g"}, "score of"},
	} {
		if _, err := parseFairPop(tc.reply); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("parseFairPop(%v): %v, want an error containing %q", tc.reply, err, tc.wantErr)
		}
	}
}
