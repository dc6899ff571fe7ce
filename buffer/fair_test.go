package buffer_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

// grouped returns n fresh tasks of group at priority prio, eligible at at.
func grouped(group string, prio, n int, at time.Time) []buffer.GroupedTask {
	out := make([]buffer.GroupedTask, n)
	for i := range out {
		out[i] = buffer.GroupedTask{Group: group, Buffered: storage.Buffered{ID: uuid.New(), Priority: prio, ScheduledAt: at.Add(time.Duration(i) * time.Millisecond)}}
	}
	return out
}

func groupsOf(entries []buffer.FairEntry) string {
	s := ""
	for _, e := range entries {
		s += e.Group
	}
	return s
}

// TestFairPopTakesTurnsAndPriorityFirst: a backlog of A does not delay B's later
// tasks more than one turn each, weights give turns per round, and a better priority
// of any group goes before every group's worse one.
func TestFairPopTakesTurnsAndPriorityFirst(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		ctx := context.Background()
		w := buffer.LevelWeightMs(0)
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := b.AddGrouped(ctx, "q", grouped("a", 5, 100, base), w); err != nil {
			t.Fatal(err)
		}
		if err := b.AddGrouped(ctx, "q", grouped("b", 5, 3, base.Add(time.Hour)), w); err != nil {
			t.Fatal(err)
		}
		p, err := b.FairPop(ctx, "q", 6, ratelimit.Limits{}, buffer.GroupLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if got := groupsOf(p.Entries); got != "ababab" {
			t.Fatalf("turns %q, want ababab", got)
		}
		if p.Remaining != 97 {
			t.Fatalf("remaining %d, want 97", p.Remaining)
		}
		two := 2
		if err := b.SetGroup(ctx, "q", "c", buffer.GroupSettings{Weight: &two}); err != nil {
			t.Fatal(err)
		}
		if err := b.AddGrouped(ctx, "q", grouped("c", 5, 10, base), w); err != nil {
			t.Fatal(err)
		}
		if err := b.AddGrouped(ctx, "q", grouped("d", 1, 2, base.Add(2*time.Hour)), w); err != nil {
			t.Fatal(err)
		}
		p, err = b.FairPop(ctx, "q", 8, ratelimit.Limits{}, buffer.GroupLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if got := groupsOf(p.Entries); got != "ddaccacc" && got != "ddcacacc" && got != "ddccacca" {
			t.Fatalf("turns %q, want d's priority-1 tasks first, then c twice per a", got)
		}
		ids, groups, err := b.FairSize(ctx, "q")
		if err != nil || ids != 101 || groups != 2 {
			t.Fatalf("size %d ids %d groups (%v), want 101 and 2", ids, groups, err)
		}
	})
}

// TestFairPopCapDoesNotBlock: a group at its cap is set aside while others go on,
// and comes back when a slot is released.
func TestFairPopCapDoesNotBlock(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		ctx := context.Background()
		w := buffer.LevelWeightMs(0)
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := b.AddGrouped(ctx, "q", grouped("a", 5, 10, base), w); err != nil {
			t.Fatal(err)
		}
		if err := b.AddGrouped(ctx, "q", grouped("b", 5, 10, base.Add(time.Hour)), w); err != nil {
			t.Fatal(err)
		}
		gl := buffer.GroupLimits{MaxConcurrency: 2}
		p, err := b.FairPop(ctx, "q", 10, ratelimit.Limits{}, gl)
		if err != nil || !p.NeedSync {
			t.Fatalf("first capped pop must ask for a sync: %+v %v", p, err)
		}
		if _, _, _, _, err := b.ReconcileGrouped(ctx, "q", nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		p, err = b.FairPop(ctx, "q", 10, ratelimit.Limits{}, gl)
		if err != nil {
			t.Fatal(err)
		}
		if got := groupsOf(p.Entries); got != "abab" || p.CapParked != 2 {
			t.Fatalf("capped pop %q, %d parked at cap; want abab, 2", got, p.CapParked)
		}
		if err := b.ReleaseGroup(ctx, "q", "b", p.Entries[1].ID); err != nil {
			t.Fatal(err)
		}
		p, err = b.FairPop(ctx, "q", 10, ratelimit.Limits{}, gl)
		if err != nil {
			t.Fatal(err)
		}
		if got := groupsOf(p.Entries); got != "b" {
			t.Fatalf("after b's release: %q, want b", got)
		}
	})
}
