package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// Diagnostics of `taskforge worker`, for profiling it under a benchmark (bench
// --worker-env passes them):
//
//   - TASKFORGE_CPUPROFILE=DIR writes a CPU profile of the whole run to
//     DIR/worker-<pid>.pprof;
//   - TASKFORGE_WORKER_STATS=1 counts the worker's requests by path and the time
//     each kind spent in flight, and logs them when the worker stops.
const (
	envCPUProfile  = "TASKFORGE_CPUPROFILE"
	envWorkerStats = "TASKFORGE_WORKER_STATS"
)

// startCPUProfile starts the CPU profile TASKFORGE_CPUPROFILE asks for and returns
// the function that stops and writes it (a no-op when none was asked for).
func startCPUProfile(log *slog.Logger) (stop func(), err error) {
	dir := os.Getenv(envCPUProfile)
	if dir == "" {
		return func() {}, nil
	}
	path := filepath.Join(dir, fmt.Sprintf("worker-%d.pprof", os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envCPUProfile, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: start the CPU profile: %w", envCPUProfile, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			log.Error("write the CPU profile", "path", path, "err", err)
		}
	}, nil
}

// requestStats is an http.RoundTripper that counts requests by path and sums the
// time each path's requests were in flight (to the response's headers).
type requestStats struct {
	next  http.RoundTripper
	start time.Time
	// out is how many requests are out now; mostOut the most that were at once.
	out, mostOut atomic.Int64
	mu           sync.Mutex
	paths        map[string]*pathStats
}

type pathStats struct {
	n        int
	inFlight time.Duration
}

func newRequestStats(next http.RoundTripper) *requestStats {
	return &requestStats{next: next, start: time.Now(), paths: map[string]*pathStats{}}
}

// RoundTrip sends req and counts it.
func (s *requestStats) RoundTrip(req *http.Request) (*http.Response, error) {
	n := s.out.Add(1)
	for m := s.mostOut.Load(); n > m && !s.mostOut.CompareAndSwap(m, n); m = s.mostOut.Load() {
	}
	began := time.Now()
	resp, err := s.next.RoundTrip(req)
	took := time.Since(began)
	s.out.Add(-1)
	s.mu.Lock()
	p := s.paths[req.URL.Path]
	if p == nil {
		p = &pathStats{}
		s.paths[req.URL.Path] = p
	}
	p.n++
	p.inFlight += took
	s.mu.Unlock()
	return resp, err
}

// log writes the counts, with tasks (the handlers started) for requests per task.
func (s *requestStats) log(log *slog.Logger, tasks int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wall := time.Since(s.start)
	args := []any{"tasks", tasks, "wall", wall.Round(time.Millisecond), "max_in_flight", s.mostOut.Load()}
	total := 0
	for path, p := range s.paths {
		total += p.n
		args = append(args, path, fmt.Sprintf("%d requests, %s in flight", p.n, p.inFlight.Round(time.Millisecond)))
	}
	if tasks > 0 {
		args = append(args, "requests_per_task", fmt.Sprintf("%.3f", float64(total)/float64(tasks)))
	}
	if p := s.paths["/workers/poll"]; p != nil && p.n > 0 {
		args = append(args, "tasks_per_poll", fmt.Sprintf("%.2f", float64(tasks)/float64(p.n)))
	}
	log.Warn("worker requests (TASKFORGE_WORKER_STATS)", args...)
}
