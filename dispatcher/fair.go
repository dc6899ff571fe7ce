package dispatcher

import (
	"context"
	"slices"
	"time"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/storage"
)

// Fair queues (fairness "round_robin") are buffered by group, and the pop takes
// turns among the groups with buffered work. What the dispatcher must add is
// reach: one group's backlog must never fill the buffer and hide another group's
// due head. So a fair queue is topped up by group: each look lists the (priority,
// group) pairs with waiting work (a skip over the distinct pairs, so a backlog costs
// nothing), and every listed group gets its share of the buffer target, the
// groups with nothing buffered first and whatever the room left: the buffer holds
// every group's head. A look lists at most GroupWindow named pairs; with more, the
// next look goes on after the last one (a cursor per queue), so each group's turn
// into the buffer comes within groups/GroupWindow looks.

// groupCursor is where a fair queue's next look at its groups resumes: after the
// named group at priority.
type groupCursor struct {
	priority int
	group    string
}

// fairRounds bounds the looks one pass makes at a fair queue while groups were
// left unlisted: while room remains, or while its looks still buffer the heads of
// groups that held nothing. When the last look still did, the pass wakes the queue
// again, so the next pass (right after this one, between the other queues' wake-ups)
// goes on where it stopped: every group's head is buffered within groups /
// (fairRounds·GroupWindow) passes of each other, not one look per sweep (with
// 100,000 groups, 1,000 groups every 5 s: over 8 minutes of dispatching while
// nobody polls), and no pass holds the dispatcher for more than fairRounds looks.
const fairRounds = 4

// A sweep looks at every fair queue with due work, and at a queue of many groups
// that means up to fairRounds looks (fairRounds·GroupWindow pairs and as many ZCARDs)
// every SweepInterval, even while every group holds its head and nobody polls. So
// the dispatcher remembers a queue as settled when a cycle of its looks, from its
// first group to its last, found every listed group holding buffered ids (no
// pick), with no wake-up or timed pass for it meanwhile; and a sweep that is the
// only reason to look at a settled queue leaves it alone while the queue's count
// of emptied group buffers (buffer.FairState.Emptied) has not moved since that
// cycle began and its buffer is at its target. Nothing else can leave a group with
// due work and nothing buffered: a group loses its last buffered id only by a pop
// or a removal, which count as emptied, and work that becomes due arrives with a
// wake-up (NOTIFY, Wake) or a timed pass, which unsettle the queue. As a safety
// net for a wake-up lost anyway, a settlement lasts fairSettledFor, only while this
// replica's LISTEN connection is up, and ends on WakeAll and when Redis lost data.

// fairSettledFor is how long a settled fair queue's sweeps may skip it.
const fairSettledFor = time.Minute

// fairSettled records a cycle of looks that picked nothing.
type fairSettled struct {
	emptied int64     // the queue's Emptied when the cycle began
	at      time.Time // when it ended
}

// fairCycle is a cycle of looks in progress.
type fairCycle struct {
	emptied int64 // the queue's Emptied when it began
	clean   bool  // no look picked anything and nothing woke the queue
}

// dispatchFair tops up fair queue's group buffers (see above) with weight
// (buffer.LevelWeightMs of its aging) and returns how many tasks it moved. sweep
// says that only the periodic sweep named the queue: it then leaves a settled
// queue alone (above), and says so.
func (d *Dispatcher) dispatchFair(ctx context.Context, queue string, weight int64, sweep bool) (moved int, settled bool, err error) {
	st, err := d.buf.FairState(ctx, queue)
	if err != nil {
		return 0, false, err
	}
	room := d.cfg.BufferTarget - int(st.IDs)
	if sweep && room <= 0 && d.settled(queue, st.Emptied) {
		return 0, true, nil
	}
	n, err := d.lookFair(ctx, queue, weight, sweep, room, st.Emptied)
	return n, false, err
}

// lookFair makes dispatchFair's looks at queue, room being what its buffer lacks of
// its target and emptied its count of emptied groups.
func (d *Dispatcher) lookFair(ctx context.Context, queue string, weight int64, sweep bool, room int, emptied int64) (int, error) {
	if !sweep {
		d.unsettle(queue)
	}
	total := 0
	for round := 0; round < fairRounds; round++ {
		cur, fresh := d.groupCursor(queue)
		if fresh {
			d.beginCycle(queue, emptied)
		}
		pairs, err := d.store.DueGroups(ctx, queue, cur.priority, cur.group, d.cfg.GroupWindow)
		if err != nil {
			return total, err
		}
		more := d.advanceGroupCursor(queue, pairs)
		picks, reach, err := d.groupPicks(ctx, queue, pairs, room)
		d.endLook(queue, len(picks) > 0 || err != nil, more)
		if err != nil || len(picks) == 0 {
			if err != nil || !more {
				return total, err
			}
			continue
		}
		n, err := d.mover.DispatchGroups(ctx, queue, picks, weight)
		total += n
		room -= n
		if err != nil || !more {
			return total, err
		}
		reached := reach && n > 0 // heads of groups that held nothing went in
		if room <= 0 && !reached {
			return total, nil
		}
		if reached && round == fairRounds-1 {
			d.wakes.Wake(queue) // more groups' heads to buffer: go on at the next pass
		}
	}
	return total, nil
}

// settled says whether queue's last cycle of looks settled it (above) and nothing
// since unsettled it, emptied being its buffers' count of emptied groups now.
func (d *Dispatcher) settled(queue string, emptied int64) bool {
	if !d.listening.Load() {
		return false
	}
	d.groupMu.Lock()
	defer d.groupMu.Unlock()
	s, ok := d.fairSettled[queue]
	return ok && s.emptied == emptied && time.Since(s.at) < fairSettledFor
}

// unsettle forgets queue's settlement, and spoils its cycle in progress: a wake-up
// or a timed pass may bring due work to a group that cycle looked at already.
func (d *Dispatcher) unsettle(queue string) {
	d.groupMu.Lock()
	defer d.groupMu.Unlock()
	delete(d.fairSettled, queue)
	if c, ok := d.fairCycles[queue]; ok {
		c.clean = false
		d.fairCycles[queue] = c
	}
}

// unsettleAll forgets every queue's settlement and spoils every cycle in progress.
func (d *Dispatcher) unsettleAll() {
	d.groupMu.Lock()
	defer d.groupMu.Unlock()
	clear(d.fairSettled)
	clear(d.fairCycles)
}

// beginCycle starts a cycle of looks at queue, from its first group, emptied being
// its buffers' count of emptied groups.
func (d *Dispatcher) beginCycle(queue string, emptied int64) {
	d.groupMu.Lock()
	defer d.groupMu.Unlock()
	if d.fairCycles == nil || len(d.fairCycles) > 100_000 {
		d.fairCycles = map[string]fairCycle{}
	}
	d.fairCycles[queue] = fairCycle{emptied: emptied, clean: true}
}

// endLook records a look at queue in its cycle: picked says it moved (or tried to
// move) something, more that groups were left unlisted. A cycle that ends clean
// settles the queue.
func (d *Dispatcher) endLook(queue string, picked, more bool) {
	d.groupMu.Lock()
	defer d.groupMu.Unlock()
	c, ok := d.fairCycles[queue]
	if !ok {
		return
	}
	if picked {
		c.clean = false
		d.fairCycles[queue] = c
	}
	if more {
		return
	}
	delete(d.fairCycles, queue)
	if !c.clean {
		delete(d.fairSettled, queue)
		return
	}
	if d.fairSettled == nil || len(d.fairSettled) > 100_000 {
		d.fairSettled = map[string]fairSettled{}
	}
	d.fairSettled[queue] = fairSettled{emptied: c.emptied, at: time.Now()}
}

// groupPicks shares out the buffer among the groups of pairs: each group's share is
// the target over the groups listed (at least 1), less what it holds already; a
// group holding nothing gets its share whatever the room (so it is reachable), the
// others within room. Pairs come best priority first, so a group's better levels
// are served first. reach says whether some pick is for a group holding nothing.
func (d *Dispatcher) groupPicks(ctx context.Context, queue string, pairs []storage.GroupPair, room int) (picks []storage.GroupPick, reach bool, err error) {
	if len(pairs) == 0 {
		return nil, false, nil
	}
	var groups []string
	for _, p := range pairs {
		groups = append(groups, groupName(p.Group))
	}
	slices.Sort(groups)
	groups = slices.Compact(groups)
	have, err := d.buf.GroupSizes(ctx, queue, groups)
	if err != nil {
		return nil, false, err
	}
	share := max(1, (d.cfg.BufferTarget+len(groups)-1)/len(groups))
	for _, p := range pairs {
		g := groupName(p.Group)
		want := share - int(have[g])
		if want <= 0 {
			continue
		}
		if have[g] > 0 { // reachable already: more only within the room
			want = min(want, room)
			if want <= 0 {
				continue
			}
		} else {
			reach = true
		}
		picks = append(picks, storage.GroupPick{Priority: p.Priority, Group: p.Group, N: want})
		have[g] += int64(want)
		room -= want
	}
	return picks, reach, nil
}

// groupCursor returns where queue's next look at its groups starts, and whether
// that is its first group.
func (d *Dispatcher) groupCursor(queue string) (groupCursor, bool) {
	d.groupMu.Lock()
	defer d.groupMu.Unlock()
	if c, ok := d.groupCursors[queue]; ok {
		return c, false
	}
	return groupCursor{priority: 1}, true
}

// advanceGroupCursor moves queue's cursor past the last named pair of a look that
// listed a full window, or back to the first group after one that listed them all,
// and reports whether groups were left unlisted.
func (d *Dispatcher) advanceGroupCursor(queue string, pairs []storage.GroupPair) bool {
	var last *storage.GroupPair
	named := 0
	for i := range pairs {
		if pairs[i].Group != nil {
			named++
			last = &pairs[i]
		}
	}
	d.groupMu.Lock()
	defer d.groupMu.Unlock()
	if named < d.cfg.GroupWindow {
		delete(d.groupCursors, queue)
		return false
	}
	if d.groupCursors == nil || len(d.groupCursors) > 100_000 {
		d.groupCursors = map[string]groupCursor{}
	}
	d.groupCursors[queue] = groupCursor{priority: last.Priority, group: *last.Group}
	return true
}

// groupName is the buffer's name of a group: "" for the unnamed one.
func groupName(g *string) string {
	if g == nil {
		return ""
	}
	return *g
}

// mirrorGroups writes every fair queue's group overrides into Redis again, after
// Redis lost its data: the pop must see the caps, rates and weights PostgreSQL
// holds.
func (d *Dispatcher) mirrorGroups(ctx context.Context) error {
	overrides, err := d.store.GroupOverrides(ctx)
	if err != nil {
		return err
	}
	for _, o := range overrides {
		s := buffer.GroupSettings{Weight: o.Weight, MaxConcurrency: o.MaxConcurrency, Rate: o.RateLimit, Burst: o.RateBurst}
		if err := d.buf.SetGroup(ctx, o.Queue, o.Group, s); err != nil {
			return err
		}
	}
	return nil
}
