package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/taskforge/taskforge/client"
)

// maxInFlight bounds the enqueues of a latency stream waiting for their answer;
// beyond it the stream falls behind its schedule (and AchievedRate shows it).
const maxInFlight = 32

// latency runs the latency step: idle long-polling workers, tasks enqueued one per
// request at a steady rate, receipt measured on the database clock.
func (r *runner) latency(ctx context.Context, run int) (res LatencyResult, err error) {
	lc := r.cfg.Latency
	name := fmt.Sprintf("latency-%s-r%d", lc.Layout.slug(), run)
	label := fmt.Sprintf("latency %s run %d", lc.Layout, run)
	res = LatencyResult{Step: Step{Experiment: ExpLatency, Run: run, LoadAvg: loadAvg()}, Layout: lc.Layout,
		TargetRate: lc.Rate}
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
	r.prog.update(true, "%s: starting %d worker processes", label, lc.Layout.Procs)
	workers, _, err := s.startWorkers(ctx, lc.Layout, "noop", "w")
	if err != nil {
		return res, err
	}
	warm := 0
	if lc.Warmup > 0 {
		ids, _, _, err := r.stream(ctx, s, lc.Rate, lc.Warmup, label+": warm-up")
		if err != nil {
			return res, err
		}
		warm = len(ids)
		if err := s.waitTerminal(ctx, "warm-up", name, warm, workers, nil); err != nil {
			return res, err
		}
	}
	before, err := s.cpu()
	if err != nil {
		return res, err
	}
	ids, rtts, achieved, err := r.stream(ctx, s, lc.Rate, lc.Duration, label)
	if err != nil {
		return res, err
	}
	res.Tasks, res.AchievedRate, res.Enqueue = len(ids), achieved, distOf(rtts)
	if err := s.waitTerminal(ctx, "tasks", name, warm+len(ids), workers, nil); err != nil {
		return res, err
	}
	after, err := s.cpu()
	if err != nil {
		return res, err
	}
	res.CPU = split(before, after, runtime.NumCPU())
	if err := s.checkTerminal(ctx, name); err != nil {
		return res, err
	}

	rows, err := s.pool.Query(ctx, receiptLatencies, ids)
	if err != nil {
		return res, fmt.Errorf("read latencies: %w", err)
	}
	defer rows.Close()
	var receipt, finish []float64
	for rows.Next() {
		var rcv, fin float64
		var done bool
		if err := rows.Scan(&rcv, &fin, &done); err != nil {
			return res, err
		}
		receipt = append(receipt, rcv)
		if done {
			res.Done++
			finish = append(finish, fin)
		}
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	res.Receipt, res.Finish = distOf(receipt), distOf(finish)
	if res.Done != res.Tasks {
		r.problemf("%s: %d of %d tasks ended done", label, res.Done, res.Tasks)
	}
	if achieved < 0.9*lc.Rate {
		r.problemf("%s: enqueued at %.0f/s, short of the %.0f/s asked for", label, achieved, lc.Rate)
	}
	r.prog.println(fmt.Sprintf("%s: %d tasks at %.0f/s: receipt p50 %.1f ms, p95 %.1f ms, p99 %.1f ms (load %.2f)",
		label, res.Tasks, achieved, res.Receipt.P50, res.Receipt.P95, res.Receipt.P99, res.LoadAvg[0]))
	return res, nil
}

// stream enqueues one task per request at rate for d, open loop: task i is sent at
// start + i/rate whatever became of the earlier ones (up to maxInFlight waiting).
// It returns the ids, each request's round trip in ms, and the achieved rate.
func (r *runner) stream(ctx context.Context, s *step, rate float64, d time.Duration, label string) ([]string, []float64, float64, error) {
	n := max(1, int(math.Round(rate*d.Seconds())))
	interval := time.Duration(float64(time.Second) / rate)
	var (
		mu       sync.Mutex
		ids      = make([]string, 0, n)
		rtts     = make([]float64, 0, n)
		firstErr error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, maxInFlight)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	start := time.Now()
	var lastSend time.Time
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			timer.Reset(wait) // pacing the schedule, not waiting for a condition
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
		}
		select {
		case <-ctx.Done():
		case sem <- struct{}{}:
		}
		mu.Lock()
		failed := firstErr
		mu.Unlock()
		if err := errors.Join(ctx.Err(), failed); err != nil {
			wg.Wait()
			return ids, rtts, 0, err
		}
		lastSend = time.Now()
		r.prog.update(false, "%s: %d/%d enqueued", label, i+1, n)
		wg.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			t0 := time.Now()
			task, err := s.api.Enqueue(cctx, s.name, client.NewTask{Payload: map[string]any{"i": i}})
			rtt := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("enqueue: %w", err)
				}
				return
			}
			ids = append(ids, task.ID)
			rtts = append(rtts, float64(rtt.Microseconds())/1000)
		})
	}
	wg.Wait()
	if firstErr != nil {
		return ids, rtts, 0, firstErr
	}
	achieved := rate
	if n > 1 {
		achieved = float64(n-1) / lastSend.Sub(start).Seconds()
	}
	return ids, rtts, achieved, nil
}
