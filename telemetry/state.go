package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskforge/taskforge/storage"
)

// StateSource reads what the state gauges show.
type StateSource interface {
	QueueStates(ctx context.Context) (map[string]storage.QueueState, error)
	WorkerHeartbeatAges(ctx context.Context, window time.Duration) (map[string]time.Duration, error)
}

// BufferSizer reports how many ids each queue's Redis buffer holds.
type BufferSizer interface {
	Sizes(ctx context.Context, queues []string) (map[string]int64, error)
	// FairSizes reports, for fair queues, the ids their group buffers hold and how
	// many groups have buffered work: counts the Redis scripts keep, read in O(1).
	FairSizes(ctx context.Context, queues []string) (ids, groups map[string]int64, err error)
}

// FairnessSource says whether a queue's groups take turns (fairness round_robin).
type FairnessSource interface {
	IsFair(ctx context.Context, queue string) (bool, error)
}

// StateCollector computes the gauges that need PostgreSQL or Redis at scrape time,
// reusing a snapshot younger than its TTL, so scrapes from several Prometheus servers
// or a dashboard cost one computation.
type StateCollector struct {
	db   StateSource
	buf  BufferSizer
	fair FairnessSource
	ttl  time.Duration

	mu    sync.Mutex
	taken time.Time
	snap  []prometheus.Metric

	depth, dlq, oldest, buffer, heartbeat *prometheus.Desc
	groupsActive, up                      *prometheus.Desc
}

// WorkerWindow bounds which workers the heartbeat-age gauge reports: those seen in the
// last hour, so departed workers' series end.
const WorkerWindow = time.Hour

// NewStateCollector returns a collector caching its snapshot for ttl.
func NewStateCollector(db StateSource, buf BufferSizer, fair FairnessSource, ttl time.Duration) *StateCollector {
	return &StateCollector{db: db, buf: buf, fair: fair, ttl: ttl,
		depth:  prometheus.NewDesc("taskforge_queue_depth", "Tasks by queue and status.", []string{"queue", "status"}, nil),
		dlq:    prometheus.NewDesc("taskforge_dlq_depth", "Dead tasks by queue.", []string{"queue"}, nil),
		oldest: prometheus.NewDesc("taskforge_oldest_pending_age_seconds", "Age of the oldest due task not yet running.", []string{"queue"}, nil),
		buffer: prometheus.NewDesc("taskforge_buffer_size", "Task ids in the queue's Redis buffer.", []string{"queue"}, nil),
		groupsActive: prometheus.NewDesc("taskforge_groups_active",
			"Groups of a fair queue with due work waiting in its Redis buffer.", []string{"queue"}, nil),
		heartbeat: prometheus.NewDesc("taskforge_worker_heartbeat_age_seconds", "Seconds since the worker last heartbeated or polled.", []string{"worker_id"}, nil),
		up:        prometheus.NewDesc("taskforge_state_collector_up", "1 when the last state snapshot succeeded.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.depth, c.dlq, c.oldest, c.buffer, c.groupsActive, c.heartbeat, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap == nil || time.Since(c.taken) >= c.ttl {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		snap, err := c.snapshot(ctx)
		cancel()
		up := 1.0
		if err != nil {
			up = 0 // keep serving the last snapshot
		} else {
			c.snap, c.taken = snap, time.Now()
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	} else {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	}
	for _, m := range c.snap {
		ch <- m
	}
}

func (c *StateCollector) snapshot(ctx context.Context) ([]prometheus.Metric, error) {
	states, err := c.db.QueueStates(ctx)
	if err != nil {
		return nil, err
	}
	ages, err := c.db.WorkerHeartbeatAges(ctx, WorkerWindow)
	if err != nil {
		return nil, err
	}
	queues := make([]string, 0, len(states))
	for q := range states {
		queues = append(queues, q)
	}
	sizes, err := c.buf.Sizes(ctx, queues)
	if err != nil {
		return nil, err
	}
	// A fair queue buffers by group: its size and its active groups are the counts
	// its scripts keep, one pipeline for every fair queue together.
	var fair []string
	for _, q := range queues {
		ok, err := c.fair.IsFair(ctx, q)
		if err != nil {
			return nil, err
		}
		if ok {
			fair = append(fair, q)
		}
	}
	var fairIDs, fairGroups map[string]int64
	if len(fair) > 0 {
		if fairIDs, fairGroups, err = c.buf.FairSizes(ctx, fair); err != nil {
			return nil, err
		}
		for _, q := range fair {
			sizes[q] += fairIDs[q]
		}
	}
	var out []prometheus.Metric
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
	}
	for q, st := range states {
		for status, n := range st.Depth {
			gauge(c.depth, float64(n), q, status)
		}
		gauge(c.dlq, float64(st.Depth[storage.StatusDead]), q)
		gauge(c.oldest, st.OldestPendingAge, q)
		gauge(c.buffer, float64(sizes[q]), q)
	}
	for _, q := range fair {
		gauge(c.groupsActive, float64(fairGroups[q]), q)
	}
	for id, age := range ages {
		gauge(c.heartbeat, age.Seconds(), id)
	}
	return out, nil
}
