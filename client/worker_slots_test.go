package client

import (
	"testing"
	"time"
)

// keeperState is a slot keeper of concurrency slots whose handlers run short
// (so it prefetches, with the prefetch room adapting from prefetch), holding
// running handlers and waiting prefetched tasks, with polls out asking for asked.
func keeperState(concurrency, prefetch, running, waiting, polls, asked int) (*slots, *slotState) {
	s := &slots{concurrency: concurrency, prefetch: prefetch, prefetchBelow: DefaultPrefetchBelow, autoPrefetch: true}
	st := &slotState{active: map[*job]jobState{}, prefetchNow: prefetch, avgRun: time.Millisecond,
		running: running, inFlight: polls, asked: asked}
	for range waiting {
		st.waiting = append(st.waiting, &job{})
	}
	return s, st
}

// TestPollWaitsForRoomWhileTasksWait: 16 slots and a prefetch room of 84 (100 in
// all). With no poll out, a poll for a small room
// waits while more tasks wait at hand than it would bring; it goes once they are
// fewer, or once the room is half of the slots and the prefetch; a second poll
// goes only for that half, while the queue has work.
func TestPollWaitsForRoomWhileTasksWait(t *testing.T) {
	for _, tc := range []struct {
		name                                   string
		running, waiting, polls, asked, wantIt int // wantIt: the poll's size, 0 for none
		lastShort                              bool
	}{
		{"nothing waits: any room", 16, 0, 0, 0, 84, false},
		{"more wait than a small room", 16, 70, 0, 0, 0, false},
		{"fewer wait than the room", 16, 40, 0, 0, 44, false},
		{"a poll out: a second for half the room", 16, 0, 1, 20, 64, false},
		{"a poll out: not for a small room", 16, 20, 1, 20, 0, false},
		{"a poll out, the queue dry: no second", 16, 0, 1, 20, 0, true},
		{"two polls out: no third", 0, 0, 2, 20, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, st := keeperState(16, 84, tc.running, tc.waiting, tc.polls, tc.asked)
			st.lastShort = tc.lastShort
			if p := s.planPoll(st); p.want != tc.wantIt {
				t.Fatalf("the poll asks for %d tasks (%d free, %d prefetch), want %d", p.want, p.free, p.prefetch, tc.wantIt)
			}
		})
	}
}

// TestPrefetchRoomAdapts: the adapted prefetch room doubles when a full poll
// comes back after the slots ran dry, up to two full polls with the slots;
// shrinks by a quarter when one comes back with tasks still waiting, down to
// Prefetch; and falls back to Prefetch when a poll comes back short. A set
// Prefetch never moves.
func TestPrefetchRoomAdapts(t *testing.T) {
	s, st := keeperState(16, 16, 16, 0, 0, 0)
	steps := []struct {
		starved, short bool
		waiting, want  int
	}{
		{true, false, 0, 32}, {true, false, 0, 64}, {true, false, 0, 128}, {true, false, 0, 184}, {true, false, 0, 184},
		{false, false, 10, 138}, {false, false, 0, 138}, {false, true, 0, 16}, {false, false, 10, 16},
	}
	for i, step := range steps {
		st.starved, st.waiting = step.starved, make([]*job, step.waiting)
		s.adaptPrefetch(st, step.short)
		if st.prefetchNow != step.want {
			t.Fatalf("step %d (%+v): prefetch room %d, want %d", i, step, st.prefetchNow, step.want)
		}
	}
	s.autoPrefetch = false
	st.starved = true
	s.adaptPrefetch(st, false)
	if st.prefetchNow != 16 {
		t.Fatalf("a set Prefetch of 16 moved to %d", st.prefetchNow)
	}
}
