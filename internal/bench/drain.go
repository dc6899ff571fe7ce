package bench

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/taskforge/taskforge/client"
)

// drainSpec describes one drain step.
type drainSpec struct {
	exp     string
	run     int
	layout  Layout
	tasks   int
	warmup  int    // ≤ 0: none
	handler string // the reference worker's handler
	payload any
	// warmPayload is the warm-up tasks' payload; nil means payload.
	warmPayload any
	sleepMs     int // for the efficiency of sleeping tasks; 0 otherwise
	queue       client.QueueSettings
	// group, when set, is every task's group (a fair queue's one group).
	group   string
	profile bool
	// after runs with the measured task ids once they are all finished, before the
	// step's processes stop and its database is dropped.
	after func(ctx context.Context, s *step, ids []string) error
}

// drain runs one drain step: start serve and the layout's workers, run the warm-up
// through them, pause the queue, enqueue the measured tasks, resume it, and wait
// until every task has finished. Throughput comes from the attempts table:
// tasks / (last attempt's finish − first attempt's start).
func (r *runner) drain(ctx context.Context, sp drainSpec) (res DrainResult, err error) {
	name := fmt.Sprintf("%s-%s-r%d", sp.exp, sp.layout.slug(), sp.run)
	label := fmt.Sprintf("%s %s (%d workers) run %d", sp.exp, sp.layout, sp.layout.Workers(), sp.run)
	res = DrainResult{Step: Step{Experiment: sp.exp, Run: sp.run, LoadAvg: loadAvg()},
		Layout: sp.layout, Workers: sp.layout.Workers(), Tasks: sp.tasks}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: %w", label, err)
			res.Error = err.Error()
		}
	}()
	profile := ""
	if sp.profile {
		profile = filepath.Join(r.cfg.ProfileDir, name+".pprof")
	}
	r.prog.update(true, "%s: starting serve", label)
	s, err := r.newStep(ctx, name, nil, profile)
	if err != nil {
		return res, err
	}
	defer s.close()
	res.Database, res.RedisPrefix = s.dbName, s.prefix

	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	_, err = s.api.CreateQueue(cctx, name, sp.queue)
	cancel()
	if err != nil {
		return res, err
	}
	r.prog.update(true, "%s: starting %d worker processes", label, sp.layout.Procs)
	workers, _, err := s.startWorkers(ctx, sp.layout, sp.handler, "w")
	if err != nil {
		return res, err
	}
	warm := max(sp.warmup, 0)
	if warm > 0 {
		if _, err := enqueueBatches(ctx, s.api, name, warm, cmpAny(sp.warmPayload, sp.payload), sp.group); err != nil {
			return res, fmt.Errorf("enqueue warm-up: %w", err)
		}
		err := s.waitTerminal(ctx, "warm-up", name, warm, workers, func(n int) {
			r.prog.update(false, "%s: warm-up %d/%d", label, n, warm)
		})
		if err != nil {
			return res, err
		}
	}

	// Enqueue everything first, then release it at once.
	if err := s.setPaused(ctx, true); err != nil {
		return res, err
	}
	r.prog.update(true, "%s: enqueueing %d tasks", label, sp.tasks)
	preloadStart := time.Now()
	ids, err := enqueueBatches(ctx, s.api, name, sp.tasks, sp.payload, sp.group)
	if err != nil {
		return res, fmt.Errorf("enqueue: %w", err)
	}
	res.PreloadRate = float64(len(ids)) / time.Since(preloadStart).Seconds()
	// What autovacuum would do on a server that runs it (this box's does not): the
	// statistics, and with them the serve's cached plans, now see the loaded table
	// rather than the warm-up's few hundred rows.
	if _, err := s.pool.Exec(ctx, "ANALYZE tasks"); err != nil {
		return res, fmt.Errorf("analyze: %w", err)
	}
	before, err := s.cpu()
	if err != nil {
		return res, err
	}
	if profile != "" {
		if err := s.serve.signal(syscall.SIGUSR1); err != nil {
			return res, err
		}
		res.Profile = profile
	}
	var resumedAt time.Time
	if err := s.pool.QueryRow(ctx, dbNow).Scan(&resumedAt); err != nil {
		return res, err
	}
	if err := s.setPaused(ctx, false); err != nil {
		return res, err
	}
	started := time.Now()
	err = s.waitTerminal(ctx, "drain", name, warm+sp.tasks, workers, func(n int) {
		done := n - warm
		r.prog.update(false, "%s: %d/%d tasks, %.0f/s", label, done, sp.tasks, float64(done)/time.Since(started).Seconds())
	})
	if err != nil {
		return res, err
	}
	after, err := s.cpu()
	if err != nil {
		return res, err
	}
	if profile != "" {
		if err := s.serve.signal(syscall.SIGUSR2); err != nil {
			return res, err
		}
	}
	res.CPU = split(before, after, runtime.NumCPU())
	if err := s.checkTerminal(ctx, name); err != nil {
		return res, err
	}

	if err := s.pool.QueryRow(ctx, drainWindow, ids).Scan(&res.Done, &res.FirstStart, &res.LastFinish); err != nil {
		return res, fmt.Errorf("read the attempts: %w", err)
	}
	res.Seconds = res.LastFinish.Sub(res.FirstStart).Seconds()
	if res.Seconds > 0 {
		res.Throughput = float64(sp.tasks) / res.Seconds
	}
	if sp.sleepMs > 0 {
		res.Efficiency = res.Throughput / (float64(res.Workers) * 1000 / float64(sp.sleepMs))
	}
	res.ResumeToFirstStartMs = float64(res.FirstStart.Sub(resumedAt).Microseconds()) / 1000
	if res.FirstStart.Before(resumedAt) {
		r.problemf("%s: a task started %s before the queue was resumed: the pause did not hold",
			label, resumedAt.Sub(res.FirstStart))
	}
	if sp.exp != ExpRetry && res.Done != sp.tasks {
		r.problemf("%s: %d of %d tasks ended done", label, res.Done, sp.tasks)
	}
	if sp.after != nil {
		if err := sp.after(ctx, s, ids); err != nil {
			return res, err
		}
	}
	r.prog.println(fmt.Sprintf("%s: %d tasks in %.2f s = %.0f tasks/s%s (load %.2f)", label, sp.tasks, res.Seconds,
		res.Throughput, effText(res.Efficiency), res.LoadAvg[0]))
	return res, nil
}

func effText(e float64) string {
	if e == 0 {
		return ""
	}
	return fmt.Sprintf(", efficiency %.0f%%", 100*e)
}

// cmpAny returns a unless it is nil, else b.
func cmpAny(a, b any) any {
	if a != nil {
		return a
	}
	return b
}

// setPaused pauses or resumes the step's queue.
func (s *step) setPaused(ctx context.Context, paused bool) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var err error
	if paused {
		_, err = s.api.PauseQueue(ctx, s.name)
	} else {
		_, err = s.api.ResumeQueue(ctx, s.name)
	}
	return err
}

// retry runs E5 with layout: every task fails once, then succeeds; each history
// must be exactly attempt 1 failed, attempt 2 succeeded.
func (r *runner) retry(ctx context.Context, run int, layout Layout) (RetryResult, error) {
	c := r.cfg.E5
	out := RetryResult{BackoffBaseMs: c.BackoffBase.Milliseconds()}
	base := c.BackoffBase
	dr, err := r.drain(ctx, drainSpec{exp: ExpRetry, run: run, layout: layout, tasks: c.Tasks, warmup: c.Warmup,
		handler: "fail", payload: map[string]any{"fail_times": 1}, warmPayload: map[string]any{"fail_times": 0},
		queue: client.QueueSettings{BackoffBase: &base},
		after: func(ctx context.Context, s *step, ids []string) error {
			rows, err := s.pool.Query(ctx, taskHistories, ids)
			if err != nil {
				return fmt.Errorf("read histories: %w", err)
			}
			defer rows.Close()
			var lags []float64
			for rows.Next() {
				var id, status string
				var attempts []string
				var lag float64
				if err := rows.Scan(&id, &status, &attempts, &lag); err != nil {
					return err
				}
				if status == client.StatusDone && slices.Equal(attempts, []string{client.AttemptFailed, client.AttemptSucceeded}) {
					out.HistoriesOK++
				} else if len(out.Bad) < 5 {
					out.Bad = append(out.Bad, fmt.Sprintf("%s: %s after %v", id, status, attempts))
				}
				if !math.IsNaN(lag) {
					lags = append(lags, lag)
				}
			}
			out.RetryLag = distOf(lags)
			return rows.Err()
		}})
	out.DrainResult = dr
	if err == nil && out.HistoriesOK != c.Tasks {
		r.problemf("e5 %s run %d: %d of %d histories are not exactly failed-then-succeeded, e.g. %v",
			layout, run, c.Tasks-out.HistoriesOK, c.Tasks, out.Bad)
	}
	return out, err
}
