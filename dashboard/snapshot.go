package dashboard

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/taskforge/taskforge/storage"
)

// Snapshot is one message of the live feed: everything the overview, worker and
// settings panels show.
type Snapshot struct {
	At                time.Time        `json:"at"`
	ComputeMs         float64          `json:"compute_ms"`
	StaleAfterSeconds float64          `json:"stale_after_seconds"`
	Queues            []QueueState     `json:"queues"`
	Workers           []storage.Worker `json:"workers"`
	// Point is the newest sample of the throughput chart.
	Point Point `json:"point"`
}

// QueueState is a queue's settings with its statistics (GET /queues/:name and
// GET /queues/:name/stats in one object).
type QueueState struct {
	storage.Queue
	Depth                   map[string]int64 `json:"depth"`
	ThroughputPerSec        float64          `json:"throughput_per_sec"`
	ErrorRate               float64          `json:"error_rate"`
	OldestPendingAgeSeconds float64          `json:"oldest_pending_age_seconds"`
	DLQDepth                int64            `json:"dlq_depth"`
	// PushAnswers are a push queue's latest answers from its target, newest first.
	PushAnswers []storage.PushAnswer `json:"push_answers,omitempty"`
}

// Point is one sample of the throughput chart: for each queue, the tasks completed
// and dead-lettered per second since the previous sample, and the backlog (pending,
// claimed and retry tasks) now. T is in Unix seconds.
type Point struct {
	T      float64               `json:"t"`
	Queues map[string][3]float64 `json:"q"`
}

// snapshot computes a Snapshot: the queue list, every queue's statistics in one
// read of the kept counts (storage.AllStats, whose cost does not grow with the
// number of tasks) and the worker list. A queue deleted meanwhile is left out.
func (d *Dashboard) snapshot(ctx context.Context) (*Snapshot, error) {
	start := time.Now()
	queues, err := d.store.ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	var stats map[string]storage.Stats
	var workers []storage.Worker
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		workers, err = d.store.ListWorkers(gctx, d.opts.StaleAfter)
		return err
	})
	g.Go(func() error {
		var err error
		stats, err = d.store.AllStats(gctx)
		return err
	})
	var pushQueues []string
	for _, q := range queues {
		if q.Push != nil {
			pushQueues = append(pushQueues, q.Name)
		}
	}
	var answers map[string][]storage.PushAnswer
	g.Go(func() error {
		var err error
		answers, err = d.store.RecentPushAnswers(gctx, pushQueues, recentPushAnswers)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	snap := &Snapshot{
		At:                start.UTC(),
		StaleAfterSeconds: d.opts.StaleAfter.Seconds(),
		Queues:            make([]QueueState, 0, len(queues)),
		Workers:           workers,
	}
	if snap.Workers == nil {
		snap.Workers = []storage.Worker{}
	}
	for _, q := range queues {
		st, ok := stats[q.Name]
		if !ok {
			continue
		}
		snap.Queues = append(snap.Queues, QueueState{Queue: q, Depth: st.Depth,
			ThroughputPerSec: st.ThroughputPerSec, ErrorRate: st.ErrorRate,
			OldestPendingAgeSeconds: st.OldestPendingAgeSecond, DLQDepth: st.DLQDepth, PushAnswers: answers[q.Name]})
	}
	snap.ComputeMs = float64(time.Since(start).Microseconds()) / 1000
	return snap, nil
}

// recentPushAnswers is how many of a push queue's latest answers a snapshot shows.
const recentPushAnswers = 5

// counts is what the chart derives its rates from.
type counts struct{ done, dead int64 }

// rater turns successive snapshots into chart points. It is used by the hub's
// goroutine only.
type rater struct {
	prevAt time.Time
	prev   map[string]counts
}

// point returns the chart sample of snap. The first sample after a (re)start has
// no rates yet (zero), only backlogs.
func (r *rater) point(snap *Snapshot) Point {
	p := Point{T: float64(snap.At.UnixMilli()) / 1000, Queues: make(map[string][3]float64, len(snap.Queues))}
	next := make(map[string]counts, len(snap.Queues))
	dt := snap.At.Sub(r.prevAt).Seconds()
	for _, q := range snap.Queues {
		now := counts{done: q.Depth[storage.StatusDone], dead: q.Depth[storage.StatusDead]}
		next[q.Name] = now
		var completed, died float64
		if prev, ok := r.prev[q.Name]; ok && dt > 0 {
			// Depths shrink when tasks are replayed or discarded; that is no negative rate.
			completed = max(0, float64(now.done-prev.done)/dt)
			died = max(0, float64(now.dead-prev.dead)/dt)
		}
		backlog := q.Depth[storage.StatusPending] + q.Depth[storage.StatusBuffered] + q.Depth[storage.StatusRetry]
		p.Queues[q.Name] = [3]float64{round2(completed), round2(died), float64(backlog)}
	}
	r.prev, r.prevAt = next, snap.At
	return p
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }
