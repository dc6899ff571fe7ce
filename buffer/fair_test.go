package buffer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/internal/testenv"
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

// TestFairPopDropsStaleDuplicate: an id the repair re-added while its task holds a
// slot is dropped by the pop, and its slot stays with the task that runs.
func TestFairPopDropsStaleDuplicate(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		ctx := context.Background()
		w := buffer.LevelWeightMs(0)
		tasks := grouped("a", 5, 2, time.Now())
		if err := b.AddGrouped(ctx, "q", tasks, w); err != nil {
			t.Fatal(err)
		}
		if _, _, _, _, err := b.ReconcileGrouped(ctx, "q", nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		gl := buffer.GroupLimits{MaxConcurrency: 2}
		p, err := b.FairPop(ctx, "q", 1, ratelimit.Limits{}, gl)
		if err != nil || len(p.Entries) != 1 || p.Entries[0].ID != tasks[0].ID {
			t.Fatalf("pop %+v %v", p, err)
		}
		if err := b.AddGrouped(ctx, "q", tasks[:1], w); err != nil { // the repair re-adds it
			t.Fatal(err)
		}
		p, err = b.FairPop(ctx, "q", 5, ratelimit.Limits{}, gl)
		if err != nil || len(p.Entries) != 1 || p.Entries[0].ID != tasks[1].ID {
			t.Fatalf("pop after a stale re-add: %+v %v; want only the second task", p, err)
		}
		// Both slots are held: the group is at its cap.
		if err := b.AddGrouped(ctx, "q", grouped("a", 5, 1, time.Now()), w); err != nil {
			t.Fatal(err)
		}
		if p, err = b.FairPop(ctx, "q", 5, ratelimit.Limits{}, gl); err != nil || len(p.Entries) != 0 || p.CapParked != 1 {
			t.Fatalf("pop at cap: %+v %v", p, err)
		}
	})
}

// TestFairPutbackAndRepairCheck: a put-back entry keeps its score and group and pops
// again first; MissingOfGrouped names the tasks no group buffer holds.
func TestFairPutbackAndRepairCheck(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		ctx := context.Background()
		w := buffer.LevelWeightMs(0)
		tasks := grouped("a", 5, 3, time.Now())
		if err := b.AddGrouped(ctx, "q", tasks, w); err != nil {
			t.Fatal(err)
		}
		p, err := b.FairPop(ctx, "q", 1, ratelimit.Limits{}, buffer.GroupLimits{})
		if err != nil || len(p.Entries) != 1 {
			t.Fatalf("pop %+v %v", p, err)
		}
		slots := []buffer.GroupSlot{{Group: "a", ID: tasks[0].ID}, {Group: "a", ID: tasks[1].ID}, {Group: "b", ID: tasks[2].ID}}
		missing, err := b.MissingOfGrouped(ctx, "q", slots)
		if err != nil || len(missing) != 2 || missing[0] != slots[0] || missing[1] != slots[2] {
			t.Fatalf("missing %v %v; want the popped task and the one asked under the wrong group", missing, err)
		}
		if err := b.PutbackGrouped(ctx, "q", p.Entries, w); err != nil {
			t.Fatal(err)
		}
		p2, err := b.FairPop(ctx, "q", 1, ratelimit.Limits{}, buffer.GroupLimits{})
		if err != nil || len(p2.Entries) != 1 || p2.Entries[0] != p.Entries[0] || p2.Remaining != 2 {
			t.Fatalf("pop after put-back %+v %v, want %+v again", p2, err, p.Entries[0])
		}
	})
}

// TestSetGroupRefusesBadSettings: out-of-range overrides are refused before Redis;
// group names follow the task field's rule.
func TestSetGroupRefusesBadSettings(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		ctx := context.Background()
		zero, big, neg := 0, 1001, -1.0
		for _, s := range []buffer.GroupSettings{{Weight: &zero}, {Weight: &big}, {MaxConcurrency: &zero}, {Rate: &neg}, {Burst: &zero}} {
			if err := b.SetGroup(ctx, "q", "a", s); !errors.Is(err, buffer.ErrBadGroupSettings) {
				t.Errorf("SetGroup(%+v) = %v, want ErrBadGroupSettings", s, err)
			}
		}
	})
	for name, ok := range map[string]bool{"": true, "tenant:42@x.y-z_A9": true, strings.Repeat("a", 200): true,
		strings.Repeat("a", 201): false, "a b": false, "{q}": false, "é": false, "a*": false} {
		if buffer.ValidGroup(name) != ok {
			t.Errorf("ValidGroup(%q) = %v, want %v", name, !ok, ok)
		}
	}
}

// TestFairRetryAfterWhenOnlyGroupRatesBlock: every group with work out of tokens →
// nothing pops, the reply counts them and says when the first token is due.
func TestFairRetryAfterWhenOnlyGroupRatesBlock(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		ctx := context.Background()
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		b = b.WithClock(func() time.Time { return now })
		w := buffer.LevelWeightMs(0)
		for _, g := range []string{"a", "b"} {
			if err := b.AddGrouped(ctx, "q", grouped(g, 5, 5, now), w); err != nil {
				t.Fatal(err)
			}
		}
		gl := buffer.GroupLimits{Rate: 4, Burst: 1} // a token every 250 ms
		p, err := b.FairPop(ctx, "q", 10, ratelimit.Limits{}, gl)
		if err != nil || len(p.Entries) != 2 || p.RateParked != 2 || p.RetryAfter != 250*time.Millisecond {
			t.Fatalf("pop %+v %v; want one each, both parked for rate, retry in 250ms", p, err)
		}
		now = now.Add(100 * time.Millisecond)
		if p, err = b.FairPop(ctx, "q", 10, ratelimit.Limits{}, gl); err != nil || len(p.Entries) != 0 || p.RetryAfter != 150*time.Millisecond {
			t.Fatalf("pop %+v %v; want nothing, retry in 150ms", p, err)
		}
		now = now.Add(150 * time.Millisecond)
		if p, err = b.FairPop(ctx, "q", 10, ratelimit.Limits{}, gl); err != nil || groupsOf(p.Entries) != "ab" {
			t.Fatalf("pop %+v %v; want one each again", p, err)
		}
	})
}

// TestFairCapsHoldAcrossReplicas: pollers on separate connections pop and release
// at once; no group ever holds more popped-and-unreleased tasks than its cap, and
// the queue's cap holds too (guarantee 1 under concurrency).
func TestFairCapsHoldAcrossReplicas(t *testing.T) {
	rdbAddr := testenv.RedisAddr(t)
	prefix := testenv.RedisPrefix(t)
	ctx := context.Background()
	w := buffer.LevelWeightMs(0)
	const groups, perGroup, gcap, qcap = 6, 40, 2, 9
	setup := buffer.New(redis.NewClient(&redis.Options{Addr: rdbAddr}), prefix)
	defer setup.Client().Close()
	for i := range groups {
		if err := setup.AddGrouped(ctx, "q", grouped(fmt.Sprintf("g%d", i), 1+i%3, perGroup, time.Now()), w); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, _, _, err := setup.ReconcileGrouped(ctx, "q", nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	running := map[string]int{}
	total, done := 0, 0
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := redis.NewClient(&redis.Options{Addr: rdbAddr})
			defer rdb.Close()
			b := buffer.New(rdb, prefix)
			for {
				p, err := b.FairPop(ctx, "q", 3, ratelimit.Limits{MaxConcurrency: qcap}, buffer.GroupLimits{MaxConcurrency: gcap})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, e := range p.Entries {
					running[e.Group]++
					total++
					if running[e.Group] > gcap || total > qcap {
						mu.Unlock()
						errs <- fmt.Errorf("group %s runs %d (cap %d), queue %d (cap %d)", e.Group, running[e.Group], gcap, total, qcap)
						return
					}
				}
				finished := done == groups*perGroup
				mu.Unlock()
				if finished {
					return
				}
				for _, e := range p.Entries {
					// Count the release before it happens, so a pop that sees the
					// freed slot never finds it still counted here.
					mu.Lock()
					running[e.Group]--
					total--
					done++
					mu.Unlock()
					if err := b.ReleaseGroup(ctx, "q", e.Group, e.ID); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if done != groups*perGroup {
		t.Fatalf("%d of %d tasks went out", done, groups*perGroup)
	}
}

// TestDropFair: dropping a fair queue leaves none of its keys and none of another
// queue's whose name starts alike (or holds glob characters).
func TestDropFair(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		ctx := context.Background()
		w := buffer.LevelWeightMs(0)
		for _, q := range []string{"q*", "q*2", "q"} {
			for _, g := range []string{"a", "b"} {
				if err := b.AddGrouped(ctx, q, grouped(g, 5, 3, time.Now()), w); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, _, _, err := b.ReconcileGrouped(ctx, q, nil, time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, err := b.FairPop(ctx, q, 2, ratelimit.Limits{Rate: 10, Burst: 5, MaxConcurrency: 5}, buffer.GroupLimits{MaxConcurrency: 1, Rate: 5}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.DropFair(ctx, "q*"); err != nil {
			t.Fatal(err)
		}
		keys, err := b.Client().Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if strings.Contains(k, "{q:q*}") {
				t.Errorf("key %s left behind", k)
			}
		}
		for _, q := range []string{"q*2", "q"} {
			if ids, groups, err := b.FairSize(ctx, q); err != nil || ids != 4 || groups != 2 {
				t.Errorf("queue %s after dropping q*: %d ids in %d groups (%v), want 4 in 2", q, ids, groups, err)
			}
		}
	})
}

// TestFairOnRedisCluster: every fair script, and DropFair, runs on a Redis Cluster,
// for queues whose hash tags land on different masters: the per-group keys the
// scripts build from the prefix share the queue's slot.
func TestFairOnRedisCluster(t *testing.T) {
	t.Parallel()
	rc := testenv.StartRedisCluster(t, 3)
	addrs := make([]string, len(rc.Nodes))
	for i, n := range rc.Nodes {
		addrs[i] = n.Addr
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	b := buffer.New(cc, "tf")
	ctx := context.Background()
	w := buffer.LevelWeightMs(0)
	for i := range 6 {
		q := fmt.Sprintf("queue-%d", i)
		if err := b.AddGrouped(ctx, q, append(grouped("a", 5, 3, time.Now()), grouped("b", 5, 3, time.Now())...), w); err != nil {
			t.Fatal(err)
		}
		if _, _, _, _, err := b.ReconcileGrouped(ctx, q, nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		two := 2
		if err := b.SetGroup(ctx, q, "a", buffer.GroupSettings{Weight: &two}); err != nil {
			t.Fatal(err)
		}
		p, err := b.FairPop(ctx, q, 4, ratelimit.Limits{Rate: 100, Burst: 10, MaxConcurrency: 10}, buffer.GroupLimits{MaxConcurrency: 3, Rate: 50})
		if err != nil || len(p.Entries) != 4 {
			t.Fatalf("queue %s: pop %+v %v", q, p, err)
		}
		if err := b.ReleaseGroup(ctx, q, p.Entries[0].Group, p.Entries[0].ID); err != nil {
			t.Fatal(err)
		}
		if err := b.RemoveGrouped(ctx, q, []buffer.GroupSlot{{Group: p.Entries[1].Group, ID: p.Entries[1].ID}}, w); err != nil {
			t.Fatal(err)
		}
		if ids, groups, err := b.FairSize(ctx, q); err != nil || ids != 2 || groups == 0 {
			t.Fatalf("queue %s: size %d ids, %d groups, %v", q, ids, groups, err)
		}
		if err := b.DropFair(ctx, q); err != nil {
			t.Fatal(err)
		}
		if ids, groups, err := b.FairSize(ctx, q); err != nil || ids != 0 || groups != 0 {
			t.Fatalf("queue %s after drop: %d ids, %d groups, %v", q, ids, groups, err)
		}
	}
}

// TestFairSmallGroupsBesideBacklog: the scenario at the buffer: one group
// with a backlog of 50,000 older tasks, then 100 groups enqueue 10 each. Polls of 10
// hand out all 1,000 small-group tasks while the big group gets at most 10: each
// small group's tasks go within one turn per task.
func TestFairSmallGroupsBesideBacklog(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	b := buffer.New(rdb, testenv.RedisPrefix(t))
	ctx := context.Background()
	w := buffer.LevelWeightMs(0)
	old := time.Now().Add(-time.Hour)
	big := grouped("big", 5, 50_000, old)
	for i := 0; i < len(big); i += 5000 {
		if err := b.AddGrouped(ctx, "q", big[i:i+5000], w); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.FairPop(ctx, "q", 10, ratelimit.Limits{}, buffer.GroupLimits{}); err != nil { // big is under way
		t.Fatal(err)
	}
	var small []buffer.GroupedTask
	for i := range 100 {
		small = append(small, grouped(fmt.Sprintf("tenant-%03d", i), 5, 10, time.Now())...)
	}
	if err := b.AddGrouped(ctx, "q", small, w); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	smallOut, polls := 0, 0
	for smallOut < len(small) {
		p, err := b.FairPop(ctx, "q", 10, ratelimit.Limits{}, buffer.GroupLimits{})
		if err != nil || len(p.Entries) == 0 {
			t.Fatalf("poll %d: %+v %v", polls, p, err)
		}
		polls++
		for _, e := range p.Entries {
			if smallOut == len(small) {
				break
			}
			count[e.Group]++
			if e.Group != "big" {
				smallOut++
			}
		}
	}
	if count["big"] > 10 {
		t.Fatalf("the big group got %d tasks while 100 groups of 10 went out, want at most 10", count["big"])
	}
	t.Logf("%d polls of 10 handed out 1,000 small-group tasks and %d of the backlog's", polls, count["big"])
}

// TestFairReleaseSkipsUncappedQueue: while the queue's pops see no cap (neither the
// queue's, nor the groups' default, nor an override), a release makes no call; once
// a pop sees a cap, or an override with a cap is set, releases free slots again.
func TestFairReleaseSkipsUncappedQueue(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		ctx := context.Background()
		rdb := b.Client()
		w := buffer.LevelWeightMs(0)
		tasks := grouped("a", 5, 4, time.Now())
		if err := b.AddGrouped(ctx, "q", tasks, w); err != nil {
			t.Fatal(err)
		}
		p, err := b.FairPop(ctx, "q", 1, ratelimit.Limits{}, buffer.GroupLimits{})
		if err != nil || len(p.Entries) != 1 || p.CapOverrides {
			t.Fatalf("uncapped pop %+v %v", p, err)
		}
		// A marker in the queue's slot set shows whether a release reached Redis.
		id := p.Entries[0].ID.String()
		running := b.RunningKey("q")
		if err := rdb.ZAdd(ctx, running, redis.Z{Score: 1, Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.ReleaseGroup(ctx, "q", "a", p.Entries[0].ID); err != nil {
			t.Fatal(err)
		}
		if rdb.ZScore(ctx, running, id).Err() != nil {
			t.Fatal("a release of an uncapped fair queue went to Redis")
		}
		// An override with a cap: releases count again, and pops report it.
		one := 1
		if err := b.SetGroup(ctx, "q", "b", buffer.GroupSettings{MaxConcurrency: &one}); err != nil {
			t.Fatal(err)
		}
		if err := b.ReleaseGroup(ctx, "q", "a", p.Entries[0].ID); err != nil {
			t.Fatal(err)
		}
		if rdb.ZScore(ctx, running, id).Err() == nil {
			t.Fatal("a release after a cap override was set did not reach Redis")
		}
		if _, _, _, _, err := b.ReconcileGrouped(ctx, "q", nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		p, err = b.FairPop(ctx, "q", 1, ratelimit.Limits{}, buffer.GroupLimits{})
		if err != nil || len(p.Entries) != 1 || !p.CapOverrides {
			t.Fatalf("pop beside a cap override %+v %v", p, err)
		}
		if err := rdb.ZAdd(ctx, running, redis.Z{Score: 1, Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.ReleaseGroup(ctx, "q", "a", uuid.MustParse(id)); err != nil {
			t.Fatal(err)
		}
		if rdb.ZScore(ctx, running, id).Err() == nil {
			t.Fatal("a release beside a cap override did not reach Redis")
		}
		// The override gone, a queue cap: releases count.
		if err := b.SetGroup(ctx, "q", "b", buffer.GroupSettings{}); err != nil {
			t.Fatal(err)
		}
		capped := ratelimit.Limits{MaxConcurrency: 5}
		p, err = b.FairPop(ctx, "q", 1, capped, buffer.GroupLimits{})
		if err != nil || len(p.Entries) != 1 || p.CapOverrides {
			t.Fatalf("pop under a queue cap %+v %v", p, err)
		}
		if err := b.ReleaseGroup(ctx, "q", "a", p.Entries[0].ID); err != nil {
			t.Fatal(err)
		}
		if n := rdb.ZCard(ctx, running).Val(); n != 0 {
			t.Fatalf("%d queue slots held after the release, want 0", n)
		}
	})
}
