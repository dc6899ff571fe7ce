package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a Redis Cluster of masters without replicas, started from the
// machine's redis-server for one test; t.Cleanup stops it.
type RedisCluster struct {
	Nodes []*RedisServer // each owns an equal share of the 16,384 slots
}

// StartRedisCluster starts n (at least 3) cluster-enabled redis-servers, gives
// each an equal range of hash slots, introduces them to each other, and waits
// until every node reports the cluster ok and knows every slot's owner.
func StartRedisCluster(t testing.TB, n int) *RedisCluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("testenv: a Redis Cluster needs at least 3 masters, not %d", n)
	}
	rc := &RedisCluster{}
	for range n {
		r, err := startRedis("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		if err != nil {
			t.Fatalf("testenv: start a Redis Cluster node: %v", err)
		}
		t.Cleanup(r.stop)
		rc.Nodes = append(rc.Nodes, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := rc.form(ctx); err != nil {
		t.Fatalf("testenv: form a Redis Cluster of %d nodes: %v", n, err)
	}
	return rc
}

// form assigns the slots, makes the nodes meet and waits for a stable cluster.
func (rc *RedisCluster) form(ctx context.Context) error {
	const slots = 16384
	n := len(rc.Nodes)
	first := newRedisClient(rc.Nodes[0].Addr, opTimeout)
	defer first.Close()
	for i, node := range rc.Nodes {
		c := newRedisClient(node.Addr, opTimeout)
		lo, hi := i*slots/n, (i+1)*slots/n-1
		err := c.ClusterAddSlotsRange(ctx, lo, hi).Err()
		if err == nil && i > 0 {
			host, port, _ := net.SplitHostPort(node.Addr)
			err = first.ClusterMeet(ctx, host, port).Err()
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", node.Addr, err)
		}
	}
	for {
		ready, why := rc.ready(ctx)
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %s", why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ready reports whether every node says cluster_state:ok and sees every node
// as a slot owner, and if not, why.
func (rc *RedisCluster) ready(ctx context.Context) (bool, string) {
	for _, node := range rc.Nodes {
		c := newRedisClient(node.Addr, opTimeout)
		info, err := c.ClusterInfo(ctx).Result()
		var owners int // shards that own slots
		if err == nil {
			var shards []redis.ClusterShard
			shards, err = c.ClusterShards(ctx).Result()
			for _, sh := range shards {
				if len(sh.Slots) > 0 {
					owners++
				}
			}
		}
		c.Close()
		switch {
		case err != nil:
			return false, fmt.Sprintf("%s: %v", node.Addr, err)
		case !strings.Contains(info, "cluster_state:ok"):
			return false, node.Addr + " reports the cluster not ok"
		case !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(rc.Nodes))+"\r"):
			return false, node.Addr + " does not know every node yet"
		case owners != len(rc.Nodes):
			return false, fmt.Sprintf("%s sees %d slot owners of %d", node.Addr, owners, len(rc.Nodes))
		}
	}
	return true, ""
}

// URL is the seed URL a cluster client takes: the first node, then the others
// as addr parameters.
func (rc *RedisCluster) URL() string {
	q := url.Values{}
	for _, node := range rc.Nodes[1:] {
		q.Add("addr", node.Addr)
	}
	return "redis://" + rc.Nodes[0].Addr + "?" + q.Encode()
}
