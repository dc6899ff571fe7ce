package telemetry_test

import (
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testserver"
)

// TestGroupsActiveGauge: taskforge_groups_active counts a fair queue's groups with
// buffered work, and taskforge_buffer_size its buffered ids, from the counts the Redis
// scripts keep (the unnamed group counts as one); both fall back to 0 as workers take the tasks. A plain queue has no
// groups_active series.
func TestGroupsActiveGauge(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("fair", map[string]any{"fairness": "round_robin"})
	s.CreateQueue("q", nil)
	for _, g := range []string{"a", "a", "b", "c"} {
		s.Enqueue("fair", map[string]any{"payload": 1, "group": g})
	}
	s.Enqueue("fair", map[string]any{"payload": 1}) // the unnamed group is one more
	s.Enqueue("q", map[string]any{"payload": 1})

	const active, size = `taskforge_groups_active{queue=fair}`, `taskforge_buffer_size{queue=fair}`
	var m map[string]float64
	testserver.Eventually(t, 10*time.Second, "four active groups with five buffered ids", func() bool {
		m = scrape(t, s)
		return m[active] == 4 && m[size] == 5
	})
	if _, ok := m[`taskforge_groups_active{queue=q}`]; ok {
		t.Errorf("a plain queue has a groups_active series: %v", m)
	}

	// One task goes: its group stays active only if it was one of a's two.
	p := s.Poll("w", []string{"fair"}, 1, 2000)
	if len(p) != 1 {
		t.Fatalf("polled %+v", p)
	}
	want := 3.0
	if p[0].Group != nil && *p[0].Group == "a" {
		want = 4
	}
	testserver.Eventually(t, 10*time.Second, "four ids left", func() bool {
		m = scrape(t, s)
		return m[size] == 4
	})
	if m[active] != want {
		t.Errorf("%s = %v after task %+v left, want %v", active, m[active], p[0], want)
	}
	for got := 1; got < 5; {
		got += len(s.Poll("w", []string{"fair"}, 5-got, 2000))
	}
	testserver.Eventually(t, 10*time.Second, "no active group", func() bool {
		m = scrape(t, s)
		return m[active] == 0 && m[size] == 0
	})
}
