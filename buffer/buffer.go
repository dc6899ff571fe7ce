// Package buffer owns TaskForge's Redis dispatch buffer: one sorted set of task ids
// per queue, scored by priority then eligible time, and the wake-up channel that
// tells API replicas new work is buffered.
//
// The buffer holds hints only. PostgreSQL decides whether a popped id is claimable;
// an entry that Redis loses is re-added by the dispatcher's repair pass; a stale
// entry is dropped when its claim fails. Nothing here may change a task's state.
package buffer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/lua"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

// strictLevelWeightMs is how much eligible time one priority level is worth without
// aging: ~317 years, so priority always wins and FIFO holds within a priority.
const strictLevelWeightMs = 1e13

// LevelWeightMs is the eligible time one priority level is worth in a queue with the
// given aging (0 = strict priority).
func LevelWeightMs(agingMs int64) int64 {
	if agingMs > 0 {
		return agingMs
	}
	return strictLevelWeightMs
}

// Score orders buffered tasks: lower pops first. It is the eligible time in Unix
// milliseconds plus levelWeightMs per priority level below the first.
func Score(priority int, eligibleAt time.Time, levelWeightMs int64) float64 {
	return float64(priority-1)*float64(levelWeightMs) + float64(eligibleAt.UnixMilli())
}

// Entry is a popped id with the score it had, so it can be put back.
type Entry struct {
	ID    uuid.UUID
	Score float64
}

// Buffer is the Redis side of dispatch. It is safe for concurrent use.
type Buffer struct {
	rdb    redis.UniversalClient
	prefix string
	now    func() time.Time // fair scripts' clock; nil = Redis TIME (see WithClock)
	// slots: whether each fair queue's pops lately saw a cap (ReleaseGroup).
	slots *slotModes
}

// New returns a Buffer whose keys start with prefix (which must not contain '{' or '}').
func New(rdb redis.UniversalClient, prefix string) *Buffer {
	return &Buffer{rdb: rdb, prefix: prefix, slots: newSlotModes()}
}

// Client returns the Redis client.
func (b *Buffer) Client() redis.UniversalClient { return b.rdb }

// Key is the sorted set holding queue's buffered task ids.
func (b *Buffer) Key(queue string) string { return b.queueKey(queue, "buffer") }

// queueKey names one of queue's keys; all share the {q:<name>} hash tag.
func (b *Buffer) queueKey(queue, what string) string {
	return b.prefix + ":{q:" + queue + "}:" + what
}

// RunningKey is the sorted set of queue's task ids holding a concurrency slot.
func (b *Buffer) RunningKey(queue string) string { return b.queueKey(queue, "running") }

// WakeChannel is the pub/sub channel announcing newly buffered work as "queue:count".
func (b *Buffer) WakeChannel() string { return b.prefix + ":wake" }

// Add mirrors tasks into queue's buffer and announces them to pollers.
func (b *Buffer) Add(ctx context.Context, queue string, tasks []storage.Buffered, levelWeightMs int64) error {
	if len(tasks) == 0 {
		return nil
	}
	members := make([]redis.Z, len(tasks))
	for i, t := range tasks {
		members[i] = redis.Z{Score: Score(t.Priority, t.ScheduledAt, levelWeightMs), Member: t.ID.String()}
	}
	return b.put(ctx, queue, members)
}

// Putback returns popped entries whose claim failed for a reason other than the task
// no longer being claimable, so they are not delayed until the repair pass.
func (b *Buffer) Putback(ctx context.Context, queue string, entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	members := make([]redis.Z, len(entries))
	for i, e := range entries {
		members[i] = redis.Z{Score: e.Score, Member: e.ID.String()}
	}
	return b.put(ctx, queue, members)
}

func (b *Buffer) put(ctx context.Context, queue string, members []redis.Z) error {
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, b.Key(queue), members...)
		p.Publish(ctx, b.WakeChannel(), queue+":"+strconv.Itoa(len(members)))
		return nil
	})
	if err != nil {
		return fmt.Errorf("buffer %d tasks of %s: %w", len(members), queue, err)
	}
	return nil
}

// Popped is what one pop returned.
type Popped struct {
	Entries []Entry
	// RetryAfter, when positive, is when the queue's token bucket next holds a token:
	// the pop came back short for want of tokens, not of buffered work.
	RetryAfter time.Duration
	Paused     bool // the queue is paused; nothing was popped
	// RedisTimeUs is the Redis clock (Unix microseconds) the script used.
	RedisTimeUs int64
	// Remaining is how many ids the buffer holds after the pop.
	Remaining int
	// NeedSync says the queue's concurrency slots must be rebuilt from PostgreSQL
	// (Reconcile) before anything can be popped.
	NeedSync bool
	AtCap    bool // every concurrency slot is taken; nothing was popped
}

// Pop takes up to n entries from queue's buffer, best first, within limits: the
// token bucket, the concurrency cap (each popped id takes a slot until Release) and
// the pause, all checked and applied in one atomic script.
func (b *Buffer) Pop(ctx context.Context, queue string, n int, limits ratelimit.Limits) (Popped, error) {
	paused := 0
	if limits.Paused {
		paused = 1
	}
	keys := []string{b.Key(queue), b.queueKey(queue, "bucket"), b.RunningKey(queue), b.queueKey(queue, "synced")}
	res, err := lua.Pop.Run(ctx, b.rdb, keys, n, limits.Rate, limits.Burst, limits.MaxConcurrency, paused).Slice()
	if err != nil {
		return Popped{}, fmt.Errorf("pop from %s: %w", queue, err)
	}
	out, err := parsePop(res)
	if err != nil {
		return Popped{}, fmt.Errorf("pop from %s: %w", queue, err)
	}
	return out, nil
}

// parsePop reads pop.lua's reply, {status, retry_after_ms, now_us, remaining, id1,
// score1, ...}, refusing one whose fields are missing or of the wrong type (a
// script out of step with this code) rather than reading zeros. A member that is
// not a UUID is not TaskForge's: it is dropped.
func parsePop(res []any) (Popped, error) {
	if len(res) < 4 || len(res)%2 != 0 {
		return Popped{}, fmt.Errorf("reply of %d fields, want 4 and then pairs: %v", len(res), res)
	}
	var head [4]int64
	for i, name := range []string{"status", "retry_after_ms", "now_us", "remaining"} {
		v, ok := res[i].(int64)
		if !ok {
			return Popped{}, fmt.Errorf("reply field %s is %T (%v), want an integer", name, res[i], res[i])
		}
		head[i] = v
	}
	status, retryMs, nowUs, remaining := head[0], head[1], head[2], head[3]
	if status < 0 || status > 3 {
		return Popped{}, fmt.Errorf("reply status %d, want 0 to 3", status)
	}
	out := Popped{Paused: status == 1, NeedSync: status == 2, AtCap: status == 3,
		RetryAfter: time.Duration(retryMs) * time.Millisecond, RedisTimeUs: nowUs, Remaining: int(remaining)}
	for i := 4; i < len(res); i += 2 {
		member, ok := res[i].(string)
		if !ok {
			return Popped{}, fmt.Errorf("reply member %d is %T (%v), want a string", (i-4)/2, res[i], res[i])
		}
		rawScore, ok := res[i+1].(string)
		if !ok {
			return Popped{}, fmt.Errorf("reply score of %s is %T (%v), want a string", member, res[i+1], res[i+1])
		}
		score, err := strconv.ParseFloat(rawScore, 64)
		if err != nil {
			return Popped{}, fmt.Errorf("reply score of %s: %w", member, err)
		}
		id, err := uuid.Parse(member)
		if err != nil {
			continue // not ours; drop it
		}
		out.Entries = append(out.Entries, Entry{ID: id, Score: score})
	}
	return out, nil
}

// Release frees the concurrency slots held by ids (no-op for ids holding none).
func (b *Buffer) Release(ctx context.Context, queue string, ids ...uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id.String()
	}
	if err := b.rdb.ZRem(ctx, b.RunningKey(queue), members...).Err(); err != nil {
		return fmt.Errorf("release slots of %s: %w", queue, err)
	}
	return nil
}

// Reconcile makes queue's concurrency slots match executing, the ids PostgreSQL shows
// executing: missing slots are added, slots older than grace whose task is not
// executing are freed, and the set is marked synced. It returns how many slots it
// added and freed.
func (b *Buffer) Reconcile(ctx context.Context, queue string, executing []uuid.UUID, grace time.Duration) (added, freed int, err error) {
	args := make([]any, 0, len(executing)+1)
	args = append(args, grace.Milliseconds())
	for _, id := range executing {
		args = append(args, id.String())
	}
	res, err := lua.Reconcile.Run(ctx, b.rdb, []string{b.RunningKey(queue), b.queueKey(queue, "synced")}, args...).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("reconcile slots of %s: %w", queue, err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("reconcile slots of %s: the script returned %v, want [added freed]", queue, res)
	}
	return int(res[0]), int(res[1]), nil
}

// SlotGrace is how long a concurrency slot may exist before PostgreSQL shows its task
// executing; older slots of tasks that are not executing are freed by SyncSlots.
const SlotGrace = 5 * time.Second

// ExecutingLister reports the tasks of a queue that PostgreSQL shows executing.
type ExecutingLister interface {
	ExecutingIDs(ctx context.Context, queue string) ([]uuid.UUID, error)
}

// SyncSlots rebuilds queue's concurrency slots from the tasks PostgreSQL shows
// executing (see Reconcile). The dispatcher runs it periodically; a poll runs it when
// Pop reports NeedSync because Redis lost the slots.
func (b *Buffer) SyncSlots(ctx context.Context, db ExecutingLister, queue string) error {
	ids, err := db.ExecutingIDs(ctx, queue)
	if err != nil {
		return err
	}
	_, _, err = b.Reconcile(ctx, queue, ids, SlotGrace)
	return err
}

// Unsync forgets that queue's slots match PostgreSQL, so the next pop rebuilds them
// (after its concurrency cap is switched on or changed).
func (b *Buffer) Unsync(ctx context.Context, queue string) error {
	b.slots.forget(queue) // a fair queue's cap switched on: its releases count again
	if err := b.rdb.Del(ctx, b.queueKey(queue, "synced")).Err(); err != nil {
		return fmt.Errorf("unsync slots of %s: %w", queue, err)
	}
	return nil
}

// Wake tells every replica's pollers of queue that up to n tasks may be available.
func (b *Buffer) Wake(ctx context.Context, queue string, n int) error {
	if err := b.rdb.Publish(ctx, b.WakeChannel(), queue+":"+strconv.Itoa(max(n, 1))).Err(); err != nil {
		return fmt.Errorf("wake pollers of %s: %w", queue, err)
	}
	return nil
}

// Sizes returns how many ids each queue's buffer holds.
func (b *Buffer) Sizes(ctx context.Context, queues []string) (map[string]int64, error) {
	cmds := make([]*redis.IntCmd, len(queues))
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range queues {
			cmds[i] = p.ZCard(ctx, b.Key(q))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("buffer sizes: %w", err)
	}
	out := make(map[string]int64, len(queues))
	for i, q := range queues {
		out[q] = cmds[i].Val()
	}
	return out, nil
}

// MissingOf returns those of tasks that their queue's buffer does not hold, in one
// pipeline whatever the number of queues.
func (b *Buffer) MissingOf(ctx context.Context, tasks []storage.BufferedTask) ([]storage.BufferedTask, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.FloatCmd, len(tasks))
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range tasks {
			cmds[i] = p.ZScore(ctx, b.Key(t.Queue), t.ID.String())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("check buffers: %w", err)
	}
	var missing []storage.BufferedTask
	for i, c := range cmds {
		if errors.Is(c.Err(), redis.Nil) {
			missing = append(missing, tasks[i])
		}
	}
	return missing, nil
}

// Lost reports whether Redis has lost its data (a restart without persistence, a
// FLUSHALL) since the last call on any replica, by a marker key that it sets when
// missing; true also the very first time. On a Redis Cluster the marker lives on
// one master: the loss of another is found by the repair pass's paging instead.
func (b *Buffer) Lost(ctx context.Context) (bool, error) {
	set, err := b.rdb.SetNX(ctx, b.prefix+":epoch", time.Now().UTC().Format(time.RFC3339), 0).Result()
	if err != nil {
		return false, fmt.Errorf("check the buffer's marker: %w", err)
	}
	return set, nil
}

// Remove deletes ids from queue's buffer (best effort: a stale id is harmless).
func (b *Buffer) Remove(ctx context.Context, queue string, ids ...uuid.UUID) error {
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id.String()
	}
	if err := b.rdb.ZRem(ctx, b.Key(queue), members...).Err(); err != nil {
		return fmt.Errorf("remove from buffer of %s: %w", queue, err)
	}
	return nil
}

// Drop deletes everything the buffer keeps for queue.
func (b *Buffer) Drop(ctx context.Context, queue string) error {
	keys := []string{b.Key(queue), b.queueKey(queue, "bucket"), b.RunningKey(queue), b.queueKey(queue, "synced")}
	if err := b.rdb.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("drop buffer of %s: %w", queue, err)
	}
	return nil
}

// ParseWake decodes a wake message into its queue and count.
func ParseWake(payload string) (queue string, count int, ok bool) {
	i := strings.LastIndexByte(payload, ':')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(payload[i+1:])
	if err != nil || n < 1 {
		return "", 0, false
	}
	return payload[:i], n, true
}
