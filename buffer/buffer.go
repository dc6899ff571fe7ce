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
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/lua"
	"github.com/taskforge/taskforge/storage"
)

// priorityWeightMs is how much eligible time one priority level is worth in a score:
// ~317 years, so priority always wins and FIFO holds within a priority.
const priorityWeightMs = 1e13

// Score orders buffered tasks: lower pops first.
func Score(priority int, eligibleAt time.Time) float64 {
	return float64(priority-1)*priorityWeightMs + float64(eligibleAt.UnixMilli())
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
}

// New returns a Buffer whose keys start with prefix (which must not contain '{' or '}').
func New(rdb redis.UniversalClient, prefix string) *Buffer {
	return &Buffer{rdb: rdb, prefix: prefix}
}

// Client returns the Redis client.
func (b *Buffer) Client() redis.UniversalClient { return b.rdb }

// Key is the sorted set holding queue's buffered task ids.
func (b *Buffer) Key(queue string) string { return b.prefix + ":{q:" + queue + "}:buffer" }

// WakeChannel is the pub/sub channel announcing newly buffered work as "queue:count".
func (b *Buffer) WakeChannel() string { return b.prefix + ":wake" }

// Add mirrors tasks into queue's buffer and announces them to pollers.
func (b *Buffer) Add(ctx context.Context, queue string, tasks []storage.Buffered) error {
	if len(tasks) == 0 {
		return nil
	}
	members := make([]redis.Z, len(tasks))
	for i, t := range tasks {
		members[i] = redis.Z{Score: Score(t.Priority, t.ScheduledAt), Member: t.ID.String()}
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

// Pop takes up to n entries from queue's buffer, best first.
func (b *Buffer) Pop(ctx context.Context, queue string, n int) ([]Entry, error) {
	res, err := lua.Pop.Run(ctx, b.rdb, []string{b.Key(queue)}, n).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("pop from %s: %w", queue, err)
	}
	out := make([]Entry, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		id, err := uuid.Parse(res[i])
		if err != nil {
			continue // not ours; drop it
		}
		score, err := strconv.ParseFloat(res[i+1], 64)
		if err != nil {
			return nil, fmt.Errorf("pop from %s: bad score %q: %w", queue, res[i+1], err)
		}
		out = append(out, Entry{ID: id, Score: score})
	}
	return out, nil
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

// Missing returns those of tasks that queue's buffer does not hold.
func (b *Buffer) Missing(ctx context.Context, queue string, tasks []storage.Buffered) ([]storage.Buffered, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.FloatCmd, len(tasks))
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range tasks {
			cmds[i] = p.ZScore(ctx, b.Key(queue), t.ID.String())
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("check buffer of %s: %w", queue, err)
	}
	var missing []storage.Buffered
	for i, c := range cmds {
		if c.Err() == redis.Nil {
			missing = append(missing, tasks[i])
		}
	}
	return missing, nil
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
	if err := b.rdb.Del(ctx, b.Key(queue)).Err(); err != nil {
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
