package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/taskforge/taskforge/client"
)

// The scale experiment's fixed settings.
const (
	// maxScaleQueues bounds the queues curve: queue names carry six digits.
	maxScaleQueues = 1_000_000
	// scaleWarmupSamples enqueue → receipt samples run first and are excluded
	// (connections, the first wake-up).
	scaleWarmupSamples = 3
	// scalePollLead is the pause between sending the probe's poll and the next
	// enqueue, so that the poll is waiting at the server. It paces the samples; it
	// is not needed for correctness (a poll that arrives after the task is
	// dispatched takes it at once).
	scalePollLead = 50 * time.Millisecond
	// scaleChunk is the rows of one INSERT of the rows curve's bulk load, and
	// scaleLoaders how many run at once (each in its own transaction).
	scaleChunk   = 50_000
	scaleLoaders = 2
	// scaleProbeWorker is the worker id of the harness's long-polling probe.
	scaleProbeWorker = "scale-probe"
	// maxFeedEvent bounds one server-sent event of the live feed.
	maxFeedEvent = 64 << 20
)

// scale runs the scale experiment: the queues curve, then the rows curve.
func (r *runner) scale(ctx context.Context, run int) error {
	c := r.cfg.Scale
	first := len(r.report.ScaleQueues)
	for _, n := range c.Queues {
		res, err := r.scaleQueues(ctx, run, n)
		r.report.ScaleQueues = append(r.report.ScaleQueues, res)
		if err != nil {
			return err
		}
	}
	setP50Ratios(r.report.ScaleQueues[first:])
	for _, m := range c.Rows {
		res, err := r.scaleRows(ctx, run, m)
		r.report.ScaleRows = append(r.report.ScaleRows, res)
		if err != nil {
			return err
		}
	}
	return nil
}

// setP50Ratios sets each point's receipt p50 over that of the point with the
// fewest queues (all from one run).
func setP50Ratios(pts []ScaleQueuesResult) {
	if len(pts) == 0 {
		return
	}
	base := slices.MinFunc(pts, func(a, b ScaleQueuesResult) int { return a.Queues - b.Queues })
	for i := range pts {
		pts[i].BaseQueues = base.Queues
		if base.Error == "" && pts[i].Error == "" && base.Receipt.P50 > 0 {
			pts[i].P50Ratio = pts[i].Receipt.P50 / base.Receipt.P50
		}
	}
}

// pause waits d or until ctx ends. The scale experiment uses it for its
// measurement windows and pacing only, never to wait for a condition.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// cores is the CPU of class over the window, in cores.
func (c CPUSplit) cores(class string) float64 {
	if c.WindowSeconds <= 0 {
		return 0
	}
	return c.Seconds[class] / c.WindowSeconds
}

// scaleQueues measures one point of the queues curve: n queues, each with one
// task due in an hour, inserted before serve starts; then serve's and
// PostgreSQL's CPU while serve is left alone, then enqueue → receipt by a
// long-polling worker on one of the queues, one task at a time.
func (r *runner) scaleQueues(ctx context.Context, run, n int) (res ScaleQueuesResult, err error) {
	c := r.cfg.Scale
	name := fmt.Sprintf("scale-q%d-r%d", n, run)
	label := fmt.Sprintf("scale %d queues run %d", n, run)
	res = ScaleQueuesResult{Step: Step{Experiment: ExpScale, Run: run, LoadAvg: loadAvg()}, Queues: n}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: %w", label, err)
			res.Error = err.Error()
		}
	}()
	r.prog.update(true, "%s: inserting %d queues", label, n)
	s, err := r.newPreparedStep(ctx, name, func(ctx context.Context, s *step) error {
		res.Database, res.RedisPrefix = s.dbName, s.prefix
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		if _, err := s.pool.Exec(cctx, scaleInsertQueues, name, n); err != nil {
			return fmt.Errorf("insert the queues: %w", err)
		}
		if _, err := s.pool.Exec(cctx, scaleInsertFutureTasks); err != nil {
			return fmt.Errorf("insert the queues' tasks: %w", err)
		}
		res.LoadSeconds = time.Since(start).Seconds()
		return s.vacuumAndCount(ctx, n)
	})
	if err != nil {
		return res, err
	}
	defer s.close()
	res.Database, res.RedisPrefix = s.dbName, s.prefix

	r.prog.update(true, "%s: settling for %s", label, c.Settle)
	if err := pause(ctx, c.Settle); err != nil {
		return res, err
	}
	r.prog.update(true, "%s: idle window of %s", label, c.IdleWindow)
	tracker, err := s.sampler.track()
	if err != nil {
		return res, err
	}
	if err := pause(ctx, c.IdleWindow); err != nil {
		_, _ = tracker.finish(runtime.NumCPU())
		return res, err
	}
	if res.IdleCPU, err = tracker.finish(runtime.NumCPU()); err != nil {
		return res, err
	}
	if s.serve.exited() {
		return res, fmt.Errorf("serve exited during the idle window (%v); its log ends:\n%s", s.serve.err, s.serve.logTail(15))
	}
	res.ServeCores = res.IdleCPU.cores(cpuServe)
	res.PostgresCores = res.IdleCPU.postgresCores()
	res.PostgresBackgroundCores = res.IdleCPU.cores(cpuPGBackgr)

	receipt, rtts, err := r.probeLatency(ctx, s, fmt.Sprintf("%s-%06d", name, 0), c.LatencySamples, label)
	if err != nil {
		return res, err
	}
	res.Receipt, res.Enqueue = distOf(receipt), distOf(rtts)
	r.prog.println(fmt.Sprintf("%s: idle serve %.3f + PostgreSQL %.3f cores; enqueue → receipt p50 %.1f ms, p95 %.1f ms (load %.2f)",
		label, res.ServeCores, res.PostgresCores, res.Receipt.P50, res.Receipt.P95, res.LoadAvg[0]))
	return res, nil
}

// vacuumAndCount runs VACUUM ANALYZE on the loaded tables, as autovacuum would
// have by the time a real system held so many rows (and so that it does not start
// during a window), and checks that want tasks are there.
func (s *step) vacuumAndCount(ctx context.Context, want int) error {
	for _, table := range []string{"queues", "tasks"} {
		if _, err := s.pool.Exec(ctx, "VACUUM (ANALYZE) "+table); err != nil {
			return fmt.Errorf("vacuum %s: %w", table, err)
		}
	}
	var got int
	if err := s.pool.QueryRow(ctx, scaleCountTasks).Scan(&got); err != nil {
		return fmt.Errorf("count the loaded tasks: %w", err)
	}
	if got != want {
		return fmt.Errorf("loaded %d tasks, want %d", got, want)
	}
	return nil
}

// pollOutcome is what one of the probe's polls returned, and when.
type pollOutcome struct {
	res *client.PollResult
	err error
	at  time.Time
}

// probeLatency measures enqueue → receipt on queue: the harness is the worker,
// long-polling (POST /workers/poll, wait_ms 30000) the queue; for each sample it
// sends a poll, lets it reach the server, notes the time, enqueues one task, and
// takes the time at which the poll answers with it; then it acks the task. It
// returns the receipts and the enqueue round trips in ms, warm-up excluded.
func (r *runner) probeLatency(ctx context.Context, s *step, queue string, samples int, label string) ([]float64, []float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends a poll still waiting
	polls := make(chan pollOutcome, 1)
	startPoll := func() {
		go func() {
			res, err := s.api.Poll(ctx, client.PollRequest{WorkerID: scaleProbeWorker, Queues: []string{queue},
				MaxTasks: 1, Wait: 30 * time.Second})
			polls <- pollOutcome{res: res, err: err, at: time.Now()}
		}()
	}
	receipt := make([]float64, 0, samples)
	rtts := make([]float64, 0, samples)
	for i := range scaleWarmupSamples + samples {
		r.prog.update(false, "%s: enqueue → receipt %d/%d", label, max(0, i-scaleWarmupSamples+1), samples)
		startPoll()
		if err := pause(ctx, scalePollLead); err != nil {
			return nil, nil, err
		}
		t0 := time.Now()
		cctx, ccancel := context.WithTimeout(ctx, opTimeout)
		task, err := s.api.Enqueue(cctx, queue, client.NewTask{Payload: map[string]any{"i": i}})
		ccancel()
		if err != nil {
			return nil, nil, fmt.Errorf("enqueue: %w", err)
		}
		rtt := time.Since(t0)
		var got client.PolledTask
		deadline := time.NewTimer(stallTimeout)
	wait:
		for {
			select {
			case <-ctx.Done():
				deadline.Stop()
				return nil, nil, ctx.Err()
			case <-deadline.C:
				return nil, nil, fmt.Errorf("task %s not received within %s", task.ID, stallTimeout)
			case o := <-polls:
				switch {
				case o.err != nil:
					deadline.Stop()
					return nil, nil, o.err
				case len(o.res.Tasks) == 0: // the wait ran out: poll again
					startPoll()
					continue
				case o.res.Tasks[0].ID != task.ID:
					deadline.Stop()
					return nil, nil, fmt.Errorf("polled task %s, enqueued %s", o.res.Tasks[0].ID, task.ID)
				}
				got = o.res.Tasks[0]
				if i >= scaleWarmupSamples {
					receipt = append(receipt, float64(o.at.Sub(t0).Microseconds())/1000)
					rtts = append(rtts, float64(rtt.Microseconds())/1000)
				}
				break wait
			}
		}
		deadline.Stop()
		cctx, ccancel = context.WithTimeout(ctx, opTimeout)
		_, err = s.api.Ack(cctx, scaleProbeWorker, got.ID, got.LeaseToken, nil)
		ccancel()
		if err != nil {
			return nil, nil, fmt.Errorf("ack: %w", err)
		}
	}
	return receipt, rtts, nil
}

// scaleRows measures one point of the rows curve: m pending tasks loaded into one
// queue before serve starts; then, with one live-feed client open, the round trips
// of the queue's stats, and over a window in which /metrics is scraped Samples
// times, the scrapes' round trips, PostgreSQL's and serve's CPU, and the feed's
// refreshes.
func (r *runner) scaleRows(ctx context.Context, run, m int) (res ScaleRowsResult, err error) {
	c := r.cfg.Scale
	name := fmt.Sprintf("scale-rows%d-r%d", m, run)
	label := fmt.Sprintf("scale %d rows run %d", m, run)
	res = ScaleRowsResult{Step: Step{Experiment: ExpScale, Run: run, LoadAvg: loadAvg()}, Rows: m}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: %w", label, err)
			res.Error = err.Error()
		}
	}()
	s, err := r.newPreparedStep(ctx, name, func(ctx context.Context, s *step) error {
		res.Database, res.RedisPrefix = s.dbName, s.prefix
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		_, err := s.pool.Exec(cctx, scaleInsertQueue, name)
		cancel()
		if err != nil {
			return fmt.Errorf("insert the queue: %w", err)
		}
		start := time.Now()
		if err := r.loadRows(ctx, s, name, m, label); err != nil {
			return err
		}
		res.LoadSeconds = time.Since(start).Seconds()
		res.LoadRowsPerSec = float64(m) / max(res.LoadSeconds, 1e-9)
		r.prog.update(true, "%s: VACUUM ANALYZE", label)
		start = time.Now()
		err = s.vacuumAndCount(ctx, m)
		res.VacuumSeconds = time.Since(start).Seconds()
		return err
	})
	if err != nil {
		return res, err
	}
	defer s.close()
	res.Database, res.RedisPrefix = s.dbName, s.prefix
	r.prog.println(fmt.Sprintf("%s: loaded in %.1f s = %.0f rows/s (VACUUM ANALYZE %.1f s)", label, res.LoadSeconds,
		res.LoadRowsPerSec, res.VacuumSeconds))

	r.prog.update(true, "%s: settling for %s", label, c.Settle)
	if err := pause(ctx, c.Settle); err != nil {
		return res, err
	}
	feed, err := openFeed(ctx, s.url)
	if err != nil {
		return res, err
	}
	defer feed.close()
	// The feed is open (its first snapshot is being computed) for everything below.

	stats := make([]float64, 0, c.Samples)
	for i := range c.Samples {
		r.prog.update(false, "%s: stats %d/%d", label, i+1, c.Samples)
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		t0 := time.Now()
		st, err := s.api.Stats(cctx, name)
		d := time.Since(t0)
		cancel()
		if err != nil {
			return res, fmt.Errorf("stats: %w", err)
		}
		stats = append(stats, float64(d.Microseconds())/1000)
		var total int64
		for _, v := range st.Depth {
			total += v
		}
		res.StatsTasks = total
	}
	res.Stats = distOf(stats)
	// Off by more than 1 %: wrong, even for a server that reports estimates.
	if math.Abs(float64(res.StatsTasks-int64(m))) > 0.01*float64(m) {
		r.problemf("%s: the queue's stats count %d tasks, %d were loaded", label, res.StatsTasks, m)
	}

	tracker, err := s.sampler.track()
	if err != nil {
		return res, err
	}
	scrapes, stale, err := r.scrapes(ctx, s, label)
	res.MetricsStale = stale
	cpu, cerr := tracker.finish(runtime.NumCPU())
	if err := errors.Join(err, cerr); err != nil {
		return res, err
	}
	res.Metrics, res.WindowCPU = distOf(scrapes), cpu
	res.ServeCores = res.WindowCPU.cores(cpuServe)
	res.PostgresCores = res.WindowCPU.postgresCores()
	res.PostgresBackgroundCores = res.WindowCPU.cores(cpuPGBackgr)

	// Enough feed refreshes: Samples after the first (which ran with the stats).
	if err := waitFor(ctx, s, "live-feed refreshes", stallTimeout, func() (bool, error) {
		n, err := feed.count()
		return n >= c.Samples+1, err
	}); err != nil {
		return res, err
	}
	compute, gaps, problems := feed.samples()
	res.FeedCompute, res.FeedGap, res.FeedProblems = distOf(compute), distOf(gaps), problems
	if problems > 0 {
		r.problemf("%s: the live feed sent %d problem event(s) (snapshots that failed)", label, problems)
	}
	r.prog.println(fmt.Sprintf("%s: stats p50 %.1f ms, metrics p50 %.1f ms, feed compute p50 %.1f ms; PostgreSQL %.3f cores (load %.2f)",
		label, res.Stats.P50, res.Metrics.P50, res.FeedCompute.P50, res.PostgresCores, res.LoadAvg[0]))
	return res, nil
}

// scrapes scrapes /metrics Samples times, ScrapeEvery after each answer, and
// returns the round trips in ms and how many answers held collectorDown.
func (r *runner) scrapes(ctx context.Context, s *step, label string) (ms []float64, stale int, err error) {
	c := r.cfg.Scale
	ms = make([]float64, 0, c.Samples)
	for i := range c.Samples {
		r.prog.update(false, "%s: window, metrics scrape %d/%d", label, i+1, c.Samples)
		if i > 0 {
			if err := pause(ctx, c.ScrapeEvery); err != nil {
				return ms, stale, err
			}
		}
		d, down, err := scrape(ctx, s.url+"/metrics")
		if err != nil {
			return ms, stale, err
		}
		ms = append(ms, float64(d.Microseconds())/1000)
		if down {
			stale++
		}
	}
	return ms, stale, nil
}

// loadRows inserts m pending tasks into queue, scaleChunk rows per statement,
// scaleLoaders statements at once.
func (r *runner) loadRows(ctx context.Context, s *step, queue string, m int, label string) error {
	var base time.Time
	if err := s.pool.QueryRow(ctx, dbNow).Scan(&base); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan [2]int)
	var (
		mu       sync.Mutex
		loaded   int
		firstErr error
		wg       sync.WaitGroup
	)
	for range scaleLoaders {
		wg.Go(func() {
			for ch := range chunks {
				cctx, ccancel := context.WithTimeout(ctx, opTimeout)
				_, err := s.pool.Exec(cctx, scaleInsertRows, queue, ch[0], ch[1], base, m)
				ccancel()
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("load rows %d–%d: %w", ch[0], ch[1], err)
					cancel()
				}
				loaded += ch[1] - ch[0] + 1
				r.prog.update(false, "%s: loaded %d/%d rows", label, loaded, m)
				mu.Unlock()
			}
		})
	}
feed:
	for lo := 1; lo <= m; lo += scaleChunk {
		select {
		case chunks <- [2]int{lo, min(lo+scaleChunk-1, m)}:
		case <-ctx.Done():
			break feed
		}
	}
	close(chunks)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// collectorDown is the line of a /metrics answer in which serve says its state
// snapshot (queue depths) failed or timed out and the figures are old.
const collectorDown = "taskforge_state_collector_up 0"

// scrape GETs url, reads the whole answer and returns the round trip and whether
// the answer holds collectorDown.
func scrape(ctx context.Context, url string) (time.Duration, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, fmt.Errorf("GET %s: %w", url, err)
	}
	d := time.Since(t0)
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return d, strings.Contains("\n"+string(body), "\n"+collectorDown+"\n"), nil
}

// waitFor polls cond every pollEvery until it holds, serve exits, ctx ends or
// timeout passes.
func waitFor(ctx context.Context, s *step, what string, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if s.serve.exited() {
			return fmt.Errorf("wait for %s: serve exited (%v); its log ends:\n%s", what, s.serve.err, s.serve.logTail(15))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wait for %s: not within %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// feedClient is one open dashboard live feed (GET /admin/events), as a browser
// holds it, recording each snapshot event's arrival and compute_ms.
type feedClient struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	arrivals []time.Time
	compute  []float64 // NaN when the event carries no compute_ms
	problems int
	err      error // why the stream ended early
}

// openFeed connects to the live feed and reads it until close.
func openFeed(ctx context.Context, base string) (*feedClient, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/admin/events", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open the live feed: %w", err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("open the live feed: %s, %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	f := &feedClient{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer resp.Body.Close()
		err := f.read(resp.Body)
		f.mu.Lock()
		if ctx.Err() == nil {
			f.err = cmpErr(err, io.ErrUnexpectedEOF)
		}
		f.mu.Unlock()
	}()
	return f, nil
}

// read parses server-sent events until the stream ends.
func (f *feedClient) read(body io.Reader) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxFeedEvent)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			event = ""
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			at := time.Now()
			switch event {
			case "snapshot":
				var snap struct {
					ComputeMs *float64 `json:"compute_ms"`
				}
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data:")), &snap); err != nil {
					return fmt.Errorf("live feed snapshot: %w", err)
				}
				ms := math.NaN()
				if snap.ComputeMs != nil {
					ms = *snap.ComputeMs
				}
				f.mu.Lock()
				f.arrivals = append(f.arrivals, at)
				f.compute = append(f.compute, ms)
				f.mu.Unlock()
			case "problem": // a refresh that failed (or outran the hub's timeout) is a refresh too
				f.mu.Lock()
				f.arrivals = append(f.arrivals, at)
				f.compute = append(f.compute, math.NaN())
				f.problems++
				f.mu.Unlock()
			}
		}
	}
	return sc.Err()
}

// count is how many refreshes (snapshots and problems) arrived so far; it fails
// once the stream ended.
func (f *feedClient) count() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.arrivals), f.err
}

// samples returns the snapshots' compute_ms (those that carry one) but the
// first refresh's (it ran during the stats), the gaps between refreshes arriving
// in ms, and the problem events.
func (f *feedClient) samples() (compute, gaps []float64, problems int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, ms := range f.compute {
		if i == 0 {
			continue
		}
		if !math.IsNaN(ms) {
			compute = append(compute, ms)
		}
		gaps = append(gaps, float64(f.arrivals[i].Sub(f.arrivals[i-1]).Microseconds())/1000)
	}
	return compute, gaps, f.problems
}

// close hangs up and waits for the reader to end.
func (f *feedClient) close() {
	f.cancel()
	<-f.done
}

// cmpErr returns err, or def when err is nil.
func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}
