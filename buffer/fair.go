package buffer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/lua"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

// This file is the Redis side of fair queues (fairness "round_robin"): one buffer
// per group instead of one per queue, weighted turns among the groups with due work,
// and per-group slots and token buckets beside the queue's own. lua/fair_lib.lua
// documents the keys; docs/flow-control.md the algorithm.

// GroupLimits are a fair queue's defaults for each of its groups.
type GroupLimits struct {
	MaxConcurrency int     // group_max_concurrency; 0 = unlimited
	Rate           float64 // group_rate_limit in tasks/s; 0 = unlimited
	Burst          int     // group_rate_burst; 0 = ceil of the group's rate
}

// GroupSettings are one group's overrides of its queue's GroupLimits; nil keeps the
// queue's default.
type GroupSettings struct {
	Weight         *int // turns per round, 1..1000; nil = 1
	MaxConcurrency *int
	Rate           *float64
	Burst          *int
}

// encode renders s as fair_set.lua takes it: "weight cap rate burst", "-" for nil.
func (s GroupSettings) encode() string {
	f := func(v *int) string {
		if v == nil {
			return "-"
		}
		return strconv.Itoa(*v)
	}
	rate := "-"
	if s.Rate != nil {
		rate = strconv.FormatFloat(*s.Rate, 'g', -1, 64)
	}
	return f(s.Weight) + " " + f(s.MaxConcurrency) + " " + rate + " " + f(s.Burst)
}

func (s GroupSettings) valid() error {
	switch {
	case s.Weight != nil && (*s.Weight < 1 || *s.Weight > 1000):
		return fmt.Errorf("weight %d, want 1..1000", *s.Weight)
	case s.MaxConcurrency != nil && *s.MaxConcurrency < 1:
		return fmt.Errorf("max_concurrency %d, want >= 1", *s.MaxConcurrency)
	case s.Rate != nil && (math.IsNaN(*s.Rate) || math.IsInf(*s.Rate, 0) || *s.Rate <= 0):
		return fmt.Errorf("rate_limit %v, want > 0", *s.Rate)
	case s.Burst != nil && *s.Burst < 1:
		return fmt.Errorf("rate_burst %d, want >= 1", *s.Burst)
	}
	return nil
}

// GroupedTask is a task to buffer in a fair queue: its group ("" = the unnamed group)
// and what the plain buffer takes.
type GroupedTask struct {
	Group string
	storage.Buffered
}

// GroupSlot names a task of a fair queue with its group ("" = the unnamed group).
type GroupSlot = storage.GroupSlot

// FairEntry is an id popped from a fair queue: its score, so it can be put back, and
// its group, whose slot it holds.
type FairEntry struct {
	Entry
	Group string
}

// FairPopped is what one fair pop returned.
type FairPopped struct {
	Entries []FairEntry
	// RetryAfter, when positive, is when a token is next due: the pop came back short
	// because the queue's bucket, or the bucket of every group with work, ran dry.
	RetryAfter  time.Duration
	Paused      bool  // the queue is paused; nothing was popped
	RedisTimeUs int64 // the clock (Unix µs) the script used; 0 when it needed none
	Remaining   int   // ids left in all of the queue's group buffers
	NeedSync    bool  // slots must be rebuilt (ReconcileGrouped) before anything pops
	AtCap       bool  // every queue slot is taken; nothing was popped
	// CapParked and RateParked count the groups this pop set aside at their cap or out
	// of tokens (taskforge_group_throttled_total{reason="cap"|"rate"}).
	CapParked, RateParked int
	// CapOverrides says some group of the queue has a cap of its own (an override),
	// so its tasks hold group slots even when neither of the queue's caps is on.
	CapOverrides bool
}

// fairKey is the prefix of every fair key of queue, inside its hash tag.
func (b *Buffer) fairKey(queue string) string { return b.queueKey(queue, "f:") }

// WithClock returns a Buffer whose fair-queue scripts take the time from now instead
// of Redis TIME. For tests: replicas must share one clock, and Redis's is that clock.
func (b *Buffer) WithClock(now func() time.Time) *Buffer {
	c := *b
	c.now = now
	return &c
}

// clockUs is the time to hand a fair script: 0 (Redis TIME) unless a clock is set.
func (b *Buffer) clockUs() int64 {
	if b.now == nil {
		return 0
	}
	return b.now().UnixMicro()
}

// AddGrouped mirrors tasks into their groups' buffers of fair queue and announces
// them to pollers.
func (b *Buffer) AddGrouped(ctx context.Context, queue string, tasks []GroupedTask, levelWeightMs int64) error {
	entries := make([]FairEntry, len(tasks))
	for i, t := range tasks {
		entries[i] = FairEntry{Entry: Entry{ID: t.ID, Score: Score(t.Priority, t.ScheduledAt, levelWeightMs)}, Group: t.Group}
	}
	return b.PutbackGrouped(ctx, queue, entries, levelWeightMs)
}

// PutbackGrouped returns popped entries to their groups' buffers (a claim that failed
// for a reason other than the task no longer being claimable) and wakes pollers.
func (b *Buffer) PutbackGrouped(ctx context.Context, queue string, entries []FairEntry, levelWeightMs int64) error {
	if len(entries) == 0 {
		return nil
	}
	args := make([]any, 0, 1+3*len(entries))
	args = append(args, levelWeightMs)
	for _, e := range entries {
		args = append(args, e.Group, e.ID.String(), strconv.FormatFloat(e.Score, 'f', -1, 64))
	}
	if err := lua.FairAdd.Run(ctx, b.rdb, []string{b.fairKey(queue)}, args...).Err(); err != nil {
		return fmt.Errorf("buffer %d tasks of fair queue %s: %w", len(entries), queue, err)
	}
	return b.Wake(ctx, queue, len(entries))
}

// RemoveGrouped deletes tasks from their groups' buffers of fair queue (best effort,
// as Remove).
func (b *Buffer) RemoveGrouped(ctx context.Context, queue string, tasks []GroupSlot, levelWeightMs int64) error {
	if len(tasks) == 0 {
		return nil
	}
	args := make([]any, 0, 1+2*len(tasks))
	args = append(args, levelWeightMs)
	for _, t := range tasks {
		args = append(args, t.Group, t.ID.String())
	}
	if err := lua.FairRemove.Run(ctx, b.rdb, []string{b.fairKey(queue)}, args...).Err(); err != nil {
		return fmt.Errorf("remove %d tasks from fair queue %s: %w", len(tasks), queue, err)
	}
	return nil
}

// FairPop takes up to n entries from fair queue's group buffers: within the best
// priority level that has due work, groups take weighted turns; the queue's limits
// (bucket, cap, pause) and each group's (cap, bucket, from group and the group's
// overrides set by SetGroup) all hold, checked and applied in one atomic script. Each
// popped id holds its queue and group slots (when those caps are on) until
// ReleaseGroup.
func (b *Buffer) FairPop(ctx context.Context, queue string, n int, limits ratelimit.Limits, group GroupLimits) (FairPopped, error) {
	paused := 0
	if limits.Paused {
		paused = 1
	}
	keys := []string{b.fairKey(queue), b.queueKey(queue, "bucket"), b.RunningKey(queue), b.queueKey(queue, "synced")}
	res, err := lua.FairPop.Run(ctx, b.rdb, keys, n, limits.Rate, limits.Burst, limits.MaxConcurrency, paused,
		group.MaxConcurrency, group.Rate, group.Burst, LevelWeightMs(limits.AgingMs), b.clockUs()).Slice()
	if err != nil {
		return FairPopped{}, fmt.Errorf("fair pop from %s: %w", queue, err)
	}
	out, err := parseFairPop(res)
	if err != nil {
		return FairPopped{}, fmt.Errorf("fair pop from %s: %w", queue, err)
	}
	b.slots.saw(queue, limits.MaxConcurrency > 0 || group.MaxConcurrency > 0 || out.CapOverrides)
	return out, nil
}

// parseFairPop reads fair_pop.lua's reply, {status, retry_after_ms, now_us,
// remaining, cap_parked, rate_parked, cap_overrides, id1, score1, group1, ...},
// refusing a malformed one (a script out of step with this code). A member that is
// not a UUID is dropped.
func parseFairPop(res []any) (FairPopped, error) {
	const head = 7
	if len(res) < head || (len(res)-head)%3 != 0 {
		return FairPopped{}, fmt.Errorf("reply of %d fields, want %d and then triples: %v", len(res), head, res)
	}
	var h [head]int64
	for i, name := range []string{"status", "retry_after_ms", "now_us", "remaining", "cap_parked", "rate_parked", "cap_overrides"} {
		v, ok := res[i].(int64)
		if !ok {
			return FairPopped{}, fmt.Errorf("reply field %s is %T (%v), want an integer", name, res[i], res[i])
		}
		h[i] = v
	}
	if h[0] < 0 || h[0] > 3 {
		return FairPopped{}, fmt.Errorf("reply status %d, want 0 to 3", h[0])
	}
	out := FairPopped{Paused: h[0] == 1, NeedSync: h[0] == 2, AtCap: h[0] == 3,
		RetryAfter: time.Duration(h[1]) * time.Millisecond, RedisTimeUs: h[2], Remaining: int(h[3]),
		CapParked: int(h[4]), RateParked: int(h[5]), CapOverrides: h[6] == 1}
	for i := head; i < len(res); i += 3 {
		member, ok1 := res[i].(string)
		rawScore, ok2 := res[i+1].(string)
		group, ok3 := res[i+2].(string)
		if !ok1 || !ok2 || !ok3 {
			return FairPopped{}, fmt.Errorf("reply entry %d is %T, %T, %T, want three strings", (i-head)/3, res[i], res[i+1], res[i+2])
		}
		score, err := strconv.ParseFloat(rawScore, 64)
		if err != nil {
			return FairPopped{}, fmt.Errorf("reply score of %s: %w", member, err)
		}
		id, err := uuid.Parse(member)
		if err != nil {
			continue // not ours; drop it
		}
		out.Entries = append(out.Entries, FairEntry{Entry: Entry{ID: id, Score: score}, Group: group})
	}
	return out, nil
}

// ReleaseGroup frees the queue and group slots held by ids of group in fair queue
// (no-op for ids holding none); a group parked at its cap goes back into the turns.
// It makes no call at all while this Buffer's pops of the queue, within the last
// slotsFresh, saw no cap on (neither the queue's, nor its groups' default, nor any
// group's override): then no pop takes a slot, as for an uncapped plain queue.
func (b *Buffer) ReleaseGroup(ctx context.Context, queue, group string, ids ...uuid.UUID) error {
	if len(ids) == 0 || b.slots.none(queue) {
		return nil
	}
	args := make([]any, 0, 2*len(ids))
	for _, id := range ids {
		args = append(args, group, id.String())
	}
	if err := lua.FairRelease.Run(ctx, b.rdb, []string{b.fairKey(queue), b.RunningKey(queue)}, args...).Err(); err != nil {
		return fmt.Errorf("release slots of group %q of %s: %w", group, queue, err)
	}
	return nil
}

// ReconcileGrouped makes fair queue's slots, the queue's and each group's, match
// executing (the tasks PostgreSQL shows executing, with their groups), as Reconcile
// does for a plain queue, and marks them synced. It returns the slots it added and
// freed in the queue's set and in the groups' sets.
func (b *Buffer) ReconcileGrouped(ctx context.Context, queue string, executing []GroupSlot, grace time.Duration) (added, freed, groupAdded, groupFreed int, err error) {
	args := make([]any, 0, 2+2*len(executing))
	nowMs := int64(0)
	if b.now != nil {
		nowMs = b.now().UnixMilli()
	}
	args = append(args, grace.Milliseconds(), nowMs)
	for _, e := range executing {
		args = append(args, e.Group, e.ID.String())
	}
	keys := []string{b.fairKey(queue), b.RunningKey(queue), b.queueKey(queue, "synced")}
	res, err := lua.FairReconcile.Run(ctx, b.rdb, keys, args...).Int64Slice()
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("reconcile slots of fair queue %s: %w", queue, err)
	}
	if len(res) != 4 {
		return 0, 0, 0, 0, fmt.Errorf("reconcile slots of fair queue %s: the script returned %v, want 4 counts", queue, res)
	}
	return int(res[0]), int(res[1]), int(res[2]), int(res[3]), nil
}

// GroupExecutingLister reports the tasks of a fair queue that PostgreSQL shows
// executing, with their groups.
type GroupExecutingLister interface {
	ExecutingGroupSlots(ctx context.Context, queue string) ([]GroupSlot, error)
}

// SyncGroupSlots rebuilds fair queue's slots from PostgreSQL (see ReconcileGrouped),
// as SyncSlots does for a plain queue.
func (b *Buffer) SyncGroupSlots(ctx context.Context, db GroupExecutingLister, queue string) error {
	slots, err := db.ExecutingGroupSlots(ctx, queue)
	if err != nil {
		return err
	}
	_, _, _, _, err = b.ReconcileGrouped(ctx, queue, slots, SlotGrace)
	return err
}

// ErrBadGroupSettings wraps the reason SetGroup refused a group's settings.
var ErrBadGroupSettings = errors.New("bad group settings")

// SetGroup mirrors group's overrides of fair queue's defaults into Redis; the zero
// GroupSettings clears them. The next pop applies them. Switching a cap on makes the
// next pop ask for a slot rebuild (NeedSync), since the group's slots were not kept.
func (b *Buffer) SetGroup(ctx context.Context, queue, group string, s GroupSettings) error {
	if err := s.valid(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadGroupSettings, err)
	}
	v := ""
	if s != (GroupSettings{}) {
		v = s.encode()
	}
	keys := []string{b.fairKey(queue), b.queueKey(queue, "synced")}
	b.slots.forget(queue) // a cap may be switched on: releases go to Redis again
	if err := lua.FairSet.Run(ctx, b.rdb, keys, group, v).Err(); err != nil {
		return fmt.Errorf("set group %q of %s: %w", group, queue, err)
	}
	return nil
}

// FairSize returns how many ids fair queue's group buffers hold, and how many groups
// have buffered work (taskforge_groups_active), in O(1).
func (b *Buffer) FairSize(ctx context.Context, queue string) (ids, groups int64, err error) {
	st, err := b.FairState(ctx, queue)
	return st.IDs, st.Groups, err
}

// FairState is what a fair queue's buffers hold, in counts the scripts keep.
type FairState struct {
	IDs    int64 // ids buffered
	Groups int64 // groups holding buffered ids
	// Emptied counts the times a group's buffer went empty (a pop took its last id,
	// or a removal did). It only grows while Redis keeps the queue's keys: while it
	// stands still, every group that held ids still does.
	Emptied int64
}

// FairState returns fair queue's FairState, in one round trip.
func (b *Buffer) FairState(ctx context.Context, queue string) (FairState, error) {
	p := b.fairKey(queue)
	vals, err := b.rdb.MGet(ctx, p+"n", p+"ng", p+"em").Result()
	if err != nil {
		return FairState{}, fmt.Errorf("state of fair queue %s: %w", queue, err)
	}
	var out FairState
	for i, into := range []*int64{&out.IDs, &out.Groups, &out.Emptied} {
		if v, ok := vals[i].(string); ok {
			*into, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return out, nil
}

// FairSizes returns FairSize of each of queues, in one pipeline: the ids their group
// buffers hold and the groups with buffered work (0 for a queue that holds none, or
// is not fair). The metrics read it at scrape time.
func (b *Buffer) FairSizes(ctx context.Context, queues []string) (ids, groups map[string]int64, err error) {
	n := make([]*redis.StringCmd, len(queues))
	g := make([]*redis.StringCmd, len(queues))
	_, err = b.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, q := range queues {
			p := b.fairKey(q)
			n[i] = pl.Get(ctx, p+"n")
			g[i] = pl.Get(ctx, p+"ng")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("sizes of fair queues: %w", err)
	}
	ids, groups = make(map[string]int64, len(queues)), make(map[string]int64, len(queues))
	for i, q := range queues {
		ids[q], _ = n[i].Int64()
		groups[q], _ = g[i].Int64()
	}
	return ids, groups, nil
}

// GroupSizes returns how many ids each of groups holds in fair queue's buffers, in
// one pipeline (the dispatcher's look before it tops groups up).
func (b *Buffer) GroupSizes(ctx context.Context, queue string, groups []string) (map[string]int64, error) {
	p := b.fairKey(queue)
	cmds := make([]*redis.IntCmd, len(groups))
	_, err := b.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, g := range groups {
			cmds[i] = pl.ZCard(ctx, p+"b:"+g)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("group buffer sizes of %s: %w", queue, err)
	}
	out := make(map[string]int64, len(groups))
	for i, g := range groups {
		out[g] = cmds[i].Val()
	}
	return out, nil
}

// MissingOfGrouped returns those of tasks that their group's buffer of fair queue
// does not hold, in one pipeline (the repair pass's check).
func (b *Buffer) MissingOfGrouped(ctx context.Context, queue string, tasks []GroupSlot) ([]GroupSlot, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	p := b.fairKey(queue)
	cmds := make([]*redis.FloatCmd, len(tasks))
	_, err := b.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, t := range tasks {
			cmds[i] = pl.ZScore(ctx, p+"b:"+t.Group, t.ID.String())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("check group buffers of %s: %w", queue, err)
	}
	var missing []GroupSlot
	for i, c := range cmds {
		if errors.Is(c.Err(), redis.Nil) {
			missing = append(missing, tasks[i])
		}
	}
	return missing, nil
}

// ValidGroup reports whether name is a group name a task may carry: 1..200 characters
// of [A-Za-z0-9._:@-], or "" for the unnamed group.
func ValidGroup(name string) bool {
	if len(name) > 200 {
		return false
	}
	return strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:@-", r))
	}) < 0
}

// DropFair deletes everything the buffer keeps for fair queue: every group's
// buffer, slots and bucket, the turn structures and the queue's own keys. It scans
// for the queue's keys (on every master of a Redis Cluster; they all live on one), so
// it costs a pass over the keyspace: for deleting a queue, not for a hot path.
func (b *Buffer) DropFair(ctx context.Context, queue string) error {
	b.slots.forget(queue)
	pattern := globEscape(b.fairKey(queue)) + "*"
	drop := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) == 500 {
				if err := c.Unlink(ctx, keys...).Err(); err != nil {
					return err
				}
				keys = keys[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(keys) > 0 {
			return c.Unlink(ctx, keys...).Err()
		}
		return nil
	}
	var err error
	if cc, ok := b.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return drop(ctx, c) })
	} else {
		err = drop(ctx, b.rdb)
	}
	if err == nil {
		err = b.Drop(ctx, queue)
	}
	if err != nil {
		return fmt.Errorf("drop fair queue %s: %w", queue, err)
	}
	return nil
}

// globEscape quotes the characters SCAN MATCH treats specially.
func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// slotsFresh is how long what a pop saw of a fair queue's caps decides whether a
// release goes to Redis. A cap switched on elsewhere (another replica's PATCH or
// group override) reaches this replica's next pop; until then, for at most this
// long, a release of a task popped under the new cap may be skipped, and the slot
// repair frees that slot (SlotGrace later): the group runs below its cap for that
// while, never above it.
const slotsFresh = time.Second

// slotModes remembers, per fair queue, whether the last pop of this Buffer (and its
// copies) saw a cap on, and when.
type slotModes struct {
	mu sync.Mutex
	m  map[string]slotMode
}

type slotMode struct {
	capped bool
	at     time.Time
}

func newSlotModes() *slotModes { return &slotModes{m: make(map[string]slotMode)} }

// saw records what a pop of queue saw.
func (s *slotModes) saw(queue string, capped bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.m[queue] = slotMode{capped: capped, at: time.Now()}
	s.mu.Unlock()
}

// none reports whether a pop of queue saw no cap on within slotsFresh.
func (s *slotModes) none(queue string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	m, ok := s.m[queue]
	s.mu.Unlock()
	return ok && !m.capped && time.Since(m.at) < slotsFresh
}

// forget drops what was seen of queue.
func (s *slotModes) forget(queue string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	delete(s.m, queue)
	s.mu.Unlock()
}
