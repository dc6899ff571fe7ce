package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc: 100 on every Linux
// architecture Go supports (the kernel's internal HZ does not leak into /proc).
const clockTicks = 100

// CPU classes of a CPUSplit.
const (
	cpuServe     = "serve"
	cpuWorkers   = "workers"
	cpuHarness   = "harness"
	cpuPGBench   = "postgres_db"
	cpuPGAutovac = "postgres_autovacuum" // autovacuum workers in the step's database
	cpuPGBackgr  = "postgres_background"
	cpuPGOther   = "postgres_other_db"
	cpuRedis     = "redis"
	cpuElsewhere = "other"
)

// procKey identifies one process across samples even if its pid is reused.
type procKey struct {
	pid   int
	start uint64 // starttime, in clock ticks since boot
}

// cpuSample is the CPU time of every process of interest, and of the machine.
type cpuSample struct {
	at      time.Time
	ticks   map[procKey]uint64 // utime + stime
	class   map[procKey]string
	machine uint64 // busy ticks of all CPUs (/proc/stat)
}

// cpuSampler classifies processes: those the harness started by pid, PostgreSQL
// and Redis by process name, PostgreSQL backends of the step's database by their
// process title.
type cpuSampler struct {
	serve   map[int]bool
	workers map[int]bool
	dbName  string
}

// sample reads /proc. Processes that vanish while it reads are skipped.
func (c *cpuSampler) sample() (cpuSample, error) {
	s := cpuSample{at: time.Now(), ticks: map[procKey]uint64{}, class: map[procKey]string{}}
	busy, err := machineBusyTicks()
	if err != nil {
		return s, err
	}
	s.machine = busy
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return s, fmt.Errorf("read /proc: %w", err)
	}
	self := os.Getpid()
	pidKey := map[int]procKey{}   // every process classified, by pid
	leaderOf := map[procKey]int{} // parallel workers: the backend they work for
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		st, err := parseProcStat(raw)
		if err != nil {
			continue
		}
		var class string
		switch {
		case pid == self:
			class = cpuHarness
		case c.serve[pid]:
			class = cpuServe
		case c.workers[pid]:
			class = cpuWorkers
		case st.comm == "postgres":
			raw, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			title := string(bytes.ReplaceAll(raw, []byte{0}, []byte{' '}))
			class = classifyPostgres(title, c.dbName)
			if leader, ok := parallelLeader(title); ok {
				leaderOf[procKey{pid, st.start}] = leader
			}
		case st.comm == "redis-server":
			class = cpuRedis
		default:
			continue
		}
		k := procKey{pid, st.start}
		s.ticks[k] = st.utime + st.stime
		s.class[k] = class
		pidKey[pid] = k
	}
	// A parallel worker's title names no database: it works for its leader's.
	for k, leader := range leaderOf {
		if lk, ok := pidKey[leader]; ok && s.class[lk] == cpuPGBench {
			s.class[k] = cpuPGBench
		}
	}
	return s, nil
}

// parallelLeader reads the leader's pid from a parallel worker's title
// ("postgres: 15/main: parallel worker for PID 1234").
func parallelLeader(title string) (int, bool) {
	_, rest, ok := strings.Cut(title, "parallel worker for PID ")
	if !ok {
		return 0, false
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(f[0])
	return pid, err == nil
}

// cpuTrackEvery is how often a cpuTracker samples.
const cpuTrackEvery = 100 * time.Millisecond

// cpuTracker samples /proc every cpuTrackEvery over a window and keeps, for every
// process seen, the last CPU time it had: a process that exits within the window
// (PostgreSQL's parallel workers live for one query; backends come and go) keeps
// what it used up to its last sample, where a before/after pair would lose it
// all. It misses at most cpuTrackEvery of each such process's time.
type cpuTracker struct {
	sampler *cpuSampler
	first   cpuSample
	stop    chan struct{}
	done    chan struct{}

	mu   sync.Mutex
	last cpuSample // ticks and classes of every process seen; at and machine of the last sample
	err  error
}

// track starts a tracker with its first sample.
func (c *cpuSampler) track() (*cpuTracker, error) {
	first, err := c.sample()
	if err != nil {
		return nil, err
	}
	t := &cpuTracker{sampler: c, first: first, stop: make(chan struct{}), done: make(chan struct{}),
		last: cpuSample{ticks: map[procKey]uint64{}, class: map[procKey]string{}}}
	t.merge(first)
	go func() {
		defer close(t.done)
		tick := time.NewTicker(cpuTrackEvery)
		defer tick.Stop()
		for {
			select {
			case <-t.stop:
				return
			case <-tick.C:
			}
			s, err := c.sample()
			if err != nil {
				t.mu.Lock()
				t.err = err
				t.mu.Unlock()
				return
			}
			t.merge(s)
		}
	}()
	return t, nil
}

func (t *cpuTracker) merge(s cpuSample) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last.at, t.last.machine = s.at, s.machine
	for k, v := range s.ticks {
		t.last.ticks[k] = v
		// A class learnt once (a parallel worker's, from its leader) is kept.
		if c, ok := t.last.class[k]; !ok || c == cpuPGOther {
			t.last.class[k] = s.class[k]
		}
	}
}

// finish takes a last sample, stops the tracker and returns the window's split.
func (t *cpuTracker) finish(cores int) (CPUSplit, error) {
	close(t.stop)
	<-t.done
	if t.err != nil {
		return CPUSplit{}, t.err
	}
	s, err := t.sampler.sample()
	if err != nil {
		return CPUSplit{}, err
	}
	t.merge(s)
	return split(t.first, t.last, cores), nil
}

// procStat holds the fields of /proc/<pid>/stat the sampler uses.
type procStat struct {
	comm         string
	utime, stime uint64
	start        uint64
}

// parseProcStat parses /proc/<pid>/stat. The command name is in parentheses and
// may itself hold spaces and parentheses, so fields are counted from the last ')'.
func parseProcStat(raw []byte) (procStat, error) {
	s := string(raw)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, errors.New("malformed /proc stat line")
	}
	f := strings.Fields(s[closing+1:])
	// f[0] is field 3 (state); utime, stime and starttime are fields 14, 15 and 22.
	if len(f) < 20 {
		return procStat{}, errors.New("short /proc stat line")
	}
	var st procStat
	var errs [3]error
	st.comm = s[open+1 : closing]
	st.utime, errs[0] = strconv.ParseUint(f[11], 10, 64)
	st.stime, errs[1] = strconv.ParseUint(f[12], 10, 64)
	st.start, errs[2] = strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return procStat{}, fmt.Errorf("/proc stat line: %w", err)
	}
	return st, nil
}

// classifyPostgres sorts a PostgreSQL process by its title ("postgres: 15/main:
// user db host(port) state" for a backend): a backend or autovacuum worker of the
// step's database, one of another database, or a background process (postmaster,
// WAL writer, checkpointer...), which works for every database.
func classifyPostgres(title, dbName string) string {
	if dbName != "" && strings.Contains(title+" ", " "+dbName+" ") {
		if strings.Contains(title, "autovacuum worker") {
			return cpuPGAutovac
		}
		return cpuPGBench
	}
	for _, bg := range []string{"checkpointer", "background writer", "walwriter", "autovacuum launcher",
		"logical replication launcher", "archiver", "stats collector", "walsender", "walreceiver", "startup"} {
		if strings.Contains(title, bg) {
			return cpuPGBackgr
		}
	}
	if !strings.HasPrefix(title, "postgres:") { // the postmaster keeps its command line
		return cpuPGBackgr
	}
	return cpuPGOther
}

// machineBusyTicks sums the non-idle CPU time of all CPUs from /proc/stat.
func machineBusyTicks() (uint64, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("unexpected /proc/stat")
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice]; guest
	// time is already counted in user.
	var busy uint64
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, nil
}

// CPUSplit is the CPU time spent during a measured window, in seconds, by class:
// serve, workers, harness (this process: enqueues and progress queries),
// postgres_db (backends of the step's database), postgres_background
// (postmaster, WAL writer, checkpointer... shared with every database),
// postgres_other_db (backends of other databases: other users of the server),
// redis (the whole server, shared), and other (the rest of the machine).
// Processes that exited during the window are missing from their class (their
// time shows under other).
type CPUSplit struct {
	WindowSeconds float64            `json:"window_s"`
	Seconds       map[string]float64 `json:"cpu_s"`
	MachineBusy   float64            `json:"machine_busy_s"`
	// Cores is the machine's CPU count; busy / (window × cores) is its load.
	Cores int `json:"cores"`
}

// split computes the CPU spent between two samples.
func split(before, after cpuSample, cores int) CPUSplit {
	out := CPUSplit{WindowSeconds: after.at.Sub(before.at).Seconds(), Seconds: map[string]float64{}, Cores: cores}
	var ours float64
	for k, t := range after.ticks {
		d := t - min(t, before.ticks[k]) // a process new in the window counts from zero
		sec := float64(d) / clockTicks
		out.Seconds[after.class[k]] += sec
		ours += sec
	}
	out.MachineBusy = float64(after.machine-min(after.machine, before.machine)) / clockTicks
	out.Seconds[cpuElsewhere] = max(0, out.MachineBusy-ours)
	for _, c := range []string{cpuServe, cpuWorkers, cpuHarness, cpuPGBench, cpuPGAutovac, cpuPGBackgr, cpuPGOther, cpuRedis} {
		out.Seconds[c] += 0 // every class present, for readers of the JSON
	}
	return out
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() [3]float64 {
	var out [3]float64
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(raw))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}

// postgresCores is the step database's PostgreSQL CPU over the window, in cores:
// its backends' and its autovacuum workers'.
func (c CPUSplit) postgresCores() float64 { return c.cores(cpuPGBench) + c.cores(cpuPGAutovac) }
