package dispatcher

import (
	"context"
	"slices"

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

// dispatchFair tops up fair queue's group buffers (see above) with weight
// (buffer.LevelWeightMs of its aging) and returns how many tasks it moved.
func (d *Dispatcher) dispatchFair(ctx context.Context, queue string, weight int64) (int, error) {
	size, _, err := d.buf.FairSize(ctx, queue)
	if err != nil {
		return 0, err
	}
	room := d.cfg.BufferTarget - int(size)
	total := 0
	for round := 0; round < fairRounds; round++ {
		cur := d.groupCursor(queue)
		pairs, err := d.store.DueGroups(ctx, queue, cur.priority, cur.group, d.cfg.GroupWindow)
		if err != nil {
			return total, err
		}
		more := d.advanceGroupCursor(queue, pairs)
		picks, reach, err := d.groupPicks(ctx, queue, pairs, room)
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

// groupCursor returns where queue's next look at its groups starts.
func (d *Dispatcher) groupCursor(queue string) groupCursor {
	d.groupMu.Lock()
	defer d.groupMu.Unlock()
	if c, ok := d.groupCursors[queue]; ok {
		return c
	}
	return groupCursor{priority: 1}
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
