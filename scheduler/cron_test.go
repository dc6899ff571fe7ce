package scheduler

import (
	"errors"
	"testing"
	"time"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// ticks returns the n ticks of expr in tz after from.
func ticks(t *testing.T, expr, tz string, from time.Time, n int) []time.Time {
	t.Helper()
	s, err := Parse(expr, tz)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]time.Time, 0, n)
	for at := from; len(out) < n; {
		at = s.Next(at)
		if at.IsZero() {
			t.Fatalf("%s: no tick after %s", expr, from)
		}
		out = append(out, at)
	}
	return out
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestNextAcrossDaylightSavingChanges(t *testing.T) {
	cases := []struct {
		name, expr, tz, from string
		want                 []string // UTC
	}{
		// Berlin springs forward on 2026-03-29 at 02:00 CET to 03:00 CEST: 02:30 does not exist that day.
		{"berlin spring daily 02:30 skipped", "30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
			[]string{"2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"}},
		{"berlin spring hourly", "0 * * * *", "Europe/Berlin", "2026-03-28T23:30:00Z",
			[]string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}}, // 01:00 CET, 03:00 CEST, 04:00 CEST
		{"berlin spring 01:30 still fires", "30 1 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T00:30:00Z", "2026-03-29T23:30:00Z"}},
		// Berlin falls back on 2026-10-25 at 03:00 CEST to 02:00 CET: 02:30 occurs twice.
		{"berlin fall daily 02:30 once", "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"berlin fall every 30 min in hour 2", "*/30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:00:00Z"}},
		{"berlin fall hourly", "@hourly", "Europe/Berlin", "2026-10-24T23:30:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"}}, // 02:00 CEST, 03:00 CET, 04:00 CET
		// New York springs forward on 2026-03-08 at 02:00 EST to 03:00 EDT.
		{"new york spring 02:15 skipped", "15 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-09T06:15:00Z", "2026-03-10T06:15:00Z"}},
		{"new york spring six fields", "0 0 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-09T06:00:00Z"}},
		// New York falls back on 2026-11-01 at 02:00 EDT to 01:00 EST: 01:30 occurs twice.
		{"new york fall 01:30 once", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"new york fall every minute of the repeated hour once", "59 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:59:00Z", "2026-11-02T06:59:00Z"}},
		{"new york fall daily", "@daily", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"}},
		// @every ignores wall clocks.
		{"every across fall back", "@every 30m", "America/New_York", "2026-11-01T05:10:00Z",
			[]string{"2026-11-01T05:40:00Z", "2026-11-01T06:10:00Z", "2026-11-01T06:40:00Z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ticks(t, c.expr, c.tz, utc(c.from), len(c.want))
			for i, w := range c.want {
				if !got[i].Equal(utc(w)) {
					t.Errorf("tick %d: %s (%s), want %s", i, got[i].Format(time.RFC3339),
						got[i].In(mustLoc(t, c.tz)).Format("2006-01-02 15:04:05 MST"), w)
				}
			}
		})
	}
}

func TestPerSecondCronSkipsTheRepeatedHour(t *testing.T) {
	got := ticks(t, "* * * * * *", "America/New_York", utc("2026-11-01T05:59:58Z"), 3)
	want := []string{"2026-11-01T05:59:59Z", "2026-11-01T07:00:00Z", "2026-11-01T07:00:01Z"}
	for i, w := range want {
		if !got[i].Equal(utc(w)) {
			t.Errorf("tick %d: %s, want %s", i, got[i].Format(time.RFC3339), w)
		}
	}
}

func TestNextFunction(t *testing.T) {
	got, err := Next("*/5 * * * *", "UTC", utc("2026-12-01T10:02:00Z"))
	if err != nil || !got.Equal(utc("2026-12-01T10:05:00Z")) {
		t.Fatalf("Next = %s, %v", got, err)
	}
	if _, err := Next("nope", "UTC", time.Now()); err == nil {
		t.Fatal("bad cron accepted")
	}
}

func TestParseRejects(t *testing.T) {
	for _, c := range []struct{ expr, tz string }{
		{"", "UTC"}, {"* * * *", "UTC"}, {"* * * * * * *", "UTC"}, {"61 * * * *", "UTC"},
		{"@every 500ms", "UTC"}, {"@every 1.5s", "UTC"}, {"@every", "UTC"}, {"@every -1s", "UTC"},
		{"@fortnightly", "UTC"}, {"CRON_TZ=UTC * * * * *", "UTC"}, {"* * * * *", "Mars/Olympus"},
		{"* * * * *", "Local"}, {"0 0 30 2 *", "UTC"},
	} {
		if _, err := Parse(c.expr, c.tz); err == nil {
			t.Errorf("Parse(%q, %q) accepted", c.expr, c.tz)
		}
	}
	if _, err := Parse("0 0 30 2 *", "UTC"); !errors.Is(err, ErrNeverFires) {
		t.Errorf("February 30: %v, want ErrNeverFires", err)
	}
	for _, expr := range []string{"* * * * *", "0 * * * * *", "@yearly", "@monthly", "@weekly", "@daily", "@hourly", "@every 1s", "@every 1h30m"} {
		if _, err := Parse(expr, ""); err != nil {
			t.Errorf("Parse(%q): %v", expr, err)
		}
	}
}

func TestPlanCollapsesMissedTicks(t *testing.T) {
	every, _ := Parse("@every 1s", "UTC")
	p := every.PlanFrom(utc("2026-12-01T10:00:00Z"), utc("2026-12-01T10:00:05Z").Add(300*time.Millisecond))
	if !p.Tick.Equal(utc("2026-12-01T10:00:05Z")) || !p.Next.Equal(utc("2026-12-01T10:00:06Z")) {
		t.Errorf("@every plan %+v", p)
	}
	p = every.PlanFrom(utc("2026-12-01T10:00:00Z"), utc("2026-12-01T10:00:00Z"))
	if !p.Tick.Equal(utc("2026-12-01T10:00:00Z")) || !p.Next.Equal(utc("2026-12-01T10:00:01Z")) {
		t.Errorf("on-time plan %+v", p)
	}
	minute, _ := Parse("* * * * *", "Europe/Berlin")
	p = minute.PlanFrom(utc("2026-01-01T00:00:00Z"), utc("2026-12-01T10:03:30Z")) // eleven months down
	if !p.Tick.Equal(utc("2026-12-01T10:03:00Z")) || !p.Next.Equal(utc("2026-12-01T10:04:00Z")) {
		t.Errorf("minute plan %+v", p)
	}
	yearly, _ := Parse("@yearly", "UTC")
	p = yearly.PlanFrom(utc("2020-01-01T00:00:00Z"), utc("2026-06-01T00:00:00Z"))
	if !p.Tick.Equal(utc("2026-01-01T00:00:00Z")) || !p.Next.Equal(utc("2027-01-01T00:00:00Z")) {
		t.Errorf("yearly plan %+v", p)
	}
}
