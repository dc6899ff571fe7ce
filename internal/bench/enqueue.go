package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/taskforge/taskforge/client"
)

// roundTrips runs the enqueue step: one producer enqueues tasks one per request,
// each sent when the answer to the one before arrived, into a queue that no worker
// polls; each request's round trip is taken on the harness's clock. It is the
// figure the peers' enqueue workload measures (an Insert or Enqueue call after
// another), so that the two compare.
func (r *runner) roundTrips(ctx context.Context, run int) (res EnqueueResult, err error) {
	ec := r.cfg.Enqueue
	name := fmt.Sprintf("enqueue-r%d", run)
	label := fmt.Sprintf("enqueue run %d", run)
	res = EnqueueResult{Step: Step{Experiment: ExpEnqueue, Run: run, LoadAvg: loadAvg()}}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: %w", label, err)
			res.Error = err.Error()
		}
	}()
	s, err := r.newQueueStep(ctx, name, label, &res.Step)
	if err != nil {
		return res, err
	}
	defer s.close()
	enqueue := func(i int) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		t0 := time.Now()
		if _, err := s.api.Enqueue(cctx, name, client.NewTask{Payload: map[string]any{"i": i}}); err != nil {
			return 0, fmt.Errorf("enqueue: %w", err)
		}
		return time.Since(t0), nil
	}
	for i := range max(ec.Warmup, 0) {
		if _, err := enqueue(i); err != nil {
			return res, err
		}
	}
	before, err := s.cpu()
	if err != nil {
		return res, err
	}
	rtts := make([]float64, 0, ec.Tasks)
	for i := range ec.Tasks {
		r.prog.update(false, "%s: %d/%d enqueued", label, i+1, ec.Tasks)
		d, err := enqueue(i)
		if err != nil {
			return res, err
		}
		rtts = append(rtts, float64(d.Microseconds())/1000)
	}
	after, err := s.cpu()
	if err != nil {
		return res, err
	}
	res.Tasks, res.RTT, res.CPU = len(rtts), distOf(rtts), split(before, after, runtime.NumCPU())
	var stored int
	if err := s.pool.QueryRow(ctx, countQueueTasks, name).Scan(&stored); err != nil {
		return res, fmt.Errorf("count the enqueued tasks: %w", err)
	}
	if want := max(ec.Warmup, 0) + ec.Tasks; stored != want {
		r.problemf("%s: %d tasks stored, %d enqueued", label, stored, want)
	}
	r.prog.println(fmt.Sprintf("%s: %d enqueues back to back: round trip p50 %.2f ms, p95 %.2f ms (load %.2f)",
		label, res.Tasks, res.RTT.P50, res.RTT.P95, res.LoadAvg[0]))
	return res, nil
}
