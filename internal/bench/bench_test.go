package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/internal/localpg"
	"github.com/taskforge/taskforge/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// buildTaskforge builds ./cmd/taskforge: the harness execs it for serve and workers.
func buildTaskforge(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "taskforge")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/taskforge/taskforge/cmd/taskforge").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestSmoke runs a small version of every experiment against real PostgreSQL and
// Redis and checks that the report is well-formed and plausible, and that the run
// left no process, database or Redis key behind.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts serve and worker processes; skipped with -short")
	}
	bin := buildTaskforge(t)
	cfg := Config{
		Binary:      bin,
		DatabaseURL: testenv.PostgresURL(t),
		RedisURL:    "redis://" + testenv.RedisAddr(t),
		Runs:        1,
		Experiments: []string{ExpNoop, ExpLatency, ExpEnqueue, ExpRetry, ExpRecovery},
		E1:          DrainConfig{Tasks: 200, Warmup: 20, Layouts: []Layout{{Procs: 2, Concurrency: 1, Prefetch: -1}}},
		Latency:     LatencyConfig{Rate: 50, Duration: 2 * time.Second, Warmup: -1, Layout: Layout{Procs: 2, Concurrency: 1, Prefetch: 0}},
		Enqueue:     EnqueueConfig{Tasks: 60, Warmup: 5},
		E5:          RetryConfig{DrainConfig: DrainConfig{Tasks: 40, Warmup: -1, Layouts: []Layout{{Procs: 2, Concurrency: 1, Prefetch: 0}}}},
		E6: RecoveryConfig{Variants: []LeaseVariant{{Name: "short", LeaseTimeout: time.Second,
			HeartbeatInterval: 250 * time.Millisecond, WatchdogInterval: 500 * time.Millisecond}},
			Victims: Layout{Procs: 1, Concurrency: 2, Prefetch: 0}, Survivors: Layout{Procs: 1, Concurrency: 2, Prefetch: 0}},
		// Info, which the harness's own warn would hide, shows that the setting
		// reached serve and won over the harness's default.
		ServeEnv: []string{"TASKFORGE_LOG_LEVEL=info"},
		WorkDir:  t.TempDir(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	report, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("run took %s", time.Since(start).Round(time.Millisecond))
	if len(report.Problems) > 0 {
		t.Errorf("problems: %q", report.Problems)
	}

	// The JSON is well-formed and holds exactly the report's fields.
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(buf.Bytes()))
	dec.DisallowUnknownFields()
	var back Report
	if err := dec.Decode(&back); err != nil {
		t.Fatalf("report JSON does not decode: %v\n%s", err, buf.String())
	}
	if back.SchemaVersion != SchemaVersion || back.Machine.Cores < 1 || back.Machine.Postgres == "" || back.Machine.Redis == "" {
		t.Errorf("machine description incomplete: %+v", back.Machine)
	}
	for _, name := range reportedSettings {
		if back.Machine.PostgresSettings[name] == "" {
			t.Errorf("PostgreSQL setting %s not recorded: %v", name, back.Machine.PostgresSettings)
		}
	}
	if got := back.Config.E1.Layouts; len(got) != 1 || got[0] != (Layout{Procs: 2, Concurrency: 1, Prefetch: -1}) {
		t.Errorf("layouts do not round-trip: %v", got)
	}
	if !slices.Equal(back.Config.ServeEnv, cfg.ServeEnv) {
		t.Errorf("serve env does not round-trip: %q", back.Config.ServeEnv)
	}
	serveLogs, err := filepath.Glob(filepath.Join(cfg.WorkDir, "*-serve.log"))
	if err != nil || len(serveLogs) == 0 {
		t.Fatalf("no serve logs in the work directory (%v)", err)
	}
	for _, name := range serveLogs {
		if b, err := os.ReadFile(name); err != nil || !bytes.Contains(b, []byte("taskforge serving")) {
			t.Errorf("%s has no info line: serve did not get --serve-env's log level (%v)", filepath.Base(name), err)
		}
	}

	if len(back.E1) != 1 || len(back.Latency) != 1 || len(back.Enqueue) != 1 || len(back.E5) != 1 || len(back.E6) != 1 {
		t.Fatalf("want one result per experiment, got e1 %d, latency %d, enqueue %d, e5 %d, e6 %d",
			len(back.E1), len(back.Latency), len(back.Enqueue), len(back.E5), len(back.E6))
	}
	e1 := back.E1[0]
	if e1.Error != "" || e1.Tasks != 200 || e1.Done != 200 || e1.Throughput <= 0 || e1.Seconds <= 0 ||
		!e1.LastFinish.After(e1.FirstStart) || e1.Workers != 2 {
		t.Errorf("implausible e1 result: %+v", e1)
	}
	if e1.CPU.WindowSeconds <= 0 || e1.CPU.Seconds[cpuServe] <= 0 || e1.CPU.Seconds[cpuWorkers] <= 0 || e1.CPU.Seconds[cpuPGBench] <= 0 {
		t.Errorf("CPU split misses serve, workers or the step's PostgreSQL backends: %+v", e1.CPU)
	}

	lat := back.Latency[0]
	if lat.Error != "" || lat.Tasks != 100 || lat.Done != lat.Tasks || lat.AchievedRate < 40 {
		t.Errorf("implausible latency result: %+v", lat)
	}
	checkDist(t, "latency receipt", lat.Receipt, lat.Tasks)
	checkDist(t, "latency finish", lat.Finish, lat.Tasks)
	if lat.Finish.P50 < lat.Receipt.P50 {
		t.Errorf("tasks finished (p50 %.2f ms) before they were received (p50 %.2f ms)", lat.Finish.P50, lat.Receipt.P50)
	}

	enq := back.Enqueue[0]
	if enq.Error != "" || enq.Tasks != 60 || enq.CPU.Seconds[cpuServe] <= 0 {
		t.Errorf("implausible enqueue result: %+v", enq)
	}
	checkDist(t, "enqueue round trip", enq.RTT, 60)

	e5 := back.E5[0]
	if e5.Error != "" || e5.HistoriesOK != 40 || e5.Throughput <= 0 {
		t.Errorf("implausible e5 result: %+v", e5)
	}
	checkDist(t, "e5 retry lag", e5.RetryLag, 40)
	if e5.RetryLag.P50 < 10 { // the backoff is at least its 10 ms base
		t.Errorf("retry lag p50 %.2f ms is shorter than the backoff", e5.RetryLag.P50)
	}

	e6 := back.E6[0]
	if e6.Error != "" || e6.Tasks != 2 || e6.HistoriesOK != 2 {
		t.Errorf("implausible e6 result: %+v", e6)
	}
	checkDist(t, "e6 expiry → re-delivery", e6.ExpiryToRedelivery, 2)
	checkDist(t, "e6 kill → re-delivery", e6.KillToRedelivery, 2)
	if e6.ExpiryToRedelivery.P50 < 0 || e6.KillToRedelivery.P50 < e6.ExpiryToRedelivery.P50 {
		t.Errorf("re-delivery before the lease expired, or before the kill: %+v", e6)
	}
	if math.Abs(e6.LeaseSeconds-1) > 0.05 {
		t.Errorf("observed lease %.3f s, configured 1 s", e6.LeaseSeconds)
	}

	if len(back.Medians) == 0 {
		t.Error("no medians")
	}
	var table bytes.Buffer
	if err := report.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"e1", "2x1", "Latency", "Enqueue", "E5", "E6", "CPU seconds", "serve ran with TASKFORGE_LOG_LEVEL=info",
		"PostgreSQL settings: autovacuum="} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}

	checkNothingLeft(t, bin, cfg, back)
}

// TestScale runs the scale experiment on tiny curves (1 and 50 queues, 1,000
// rows) against real PostgreSQL and Redis, and checks that every point is
// reported, plausible and cleaned up.
func TestScale(t *testing.T) {
	if testing.Short() {
		t.Skip("starts serve processes; skipped with -short")
	}
	bin := buildTaskforge(t)
	cfg := Config{
		Binary:      bin,
		DatabaseURL: testenv.PostgresURL(t),
		RedisURL:    "redis://" + testenv.RedisAddr(t),
		Experiments: []string{ExpScale},
		Scale: ScaleConfig{Queues: []int{50, 1}, Rows: []int{1000}, Settle: 200 * time.Millisecond,
			IdleWindow: time.Second, LatencySamples: 10, Samples: 3, ScrapeEvery: 100 * time.Millisecond},
		WorkDir: t.TempDir(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(report.Problems) > 0 {
		t.Errorf("problems: %q", report.Problems)
	}
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(buf.Bytes()))
	dec.DisallowUnknownFields()
	var back Report
	if err := dec.Decode(&back); err != nil {
		t.Fatalf("report JSON does not decode: %v\n%s", err, buf.String())
	}

	if len(back.ScaleQueues) != 2 || len(back.ScaleRows) != 1 {
		t.Fatalf("want 2 queues points and 1 rows point, got %d and %d", len(back.ScaleQueues), len(back.ScaleRows))
	}
	for i, want := range []int{50, 1} {
		q := back.ScaleQueues[i]
		if q.Error != "" || q.Queues != want || q.BaseQueues != 1 || q.P50Ratio <= 0 {
			t.Errorf("implausible queues point: %+v", q)
		}
		checkDist(t, fmt.Sprintf("%d queues receipt", want), q.Receipt, 10)
		checkDist(t, fmt.Sprintf("%d queues enqueue", want), q.Enqueue, 10)
		if q.Receipt.P50 < q.Enqueue.P50/10 || q.IdleCPU.WindowSeconds < 1 || q.ServeCores < 0 || q.ServeCores > 2 {
			t.Errorf("%d queues: receipt %.2f ms against an enqueue of %.2f ms, window %.2f s, serve %.3f cores",
				want, q.Receipt.P50, q.Enqueue.P50, q.IdleCPU.WindowSeconds, q.ServeCores)
		}
	}
	if base := back.ScaleQueues[1]; base.P50Ratio != 1 {
		t.Errorf("the 1-queue point's ratio to itself is %v", base.P50Ratio)
	}
	w := back.ScaleRows[0]
	if w.Error != "" || w.Rows != 1000 || w.StatsTasks != 1000 || w.LoadRowsPerSec <= 0 || w.FeedProblems != 0 ||
		w.MetricsStale != 0 {
		t.Errorf("implausible rows point: %+v", w)
	}
	checkDist(t, "stats", w.Stats, 3)
	checkDist(t, "metrics", w.Metrics, 3)
	if w.FeedCompute.N < 3 || w.FeedGap.N < 3 || w.FeedGap.P50 < 100 {
		t.Errorf("live feed: %d compute samples, %d gaps (p50 %.0f ms); want 3 each, about 1 s apart",
			w.FeedCompute.N, w.FeedGap.N, w.FeedGap.P50)
	}
	// The window is too short here for every class to get a clock tick.
	if w.WindowCPU.WindowSeconds <= 0 || w.PostgresCores < 0 || w.ServeCores < 0 || w.WindowCPU.MachineBusy <= 0 {
		t.Errorf("implausible window CPU: %+v", w.WindowCPU)
	}

	var table bytes.Buffer
	if err := report.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Scale: queues", "Scale: rows", "1.00× of 1"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	checkNothingLeft(t, bin, cfg, back)
}

func TestParseCounts(t *testing.T) {
	got, err := ParseCounts(" 1, 1000,,10k, 2M ")
	if err != nil || !slices.Equal(got, []int{1, 1000, 10_000, 2_000_000}) {
		t.Errorf("ParseCounts = %v, %v", got, err)
	}
	if got, err := ParseCounts("none"); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ParseCounts(none) = %#v, %v; want an empty list", got, err)
	}
	for _, in := range []string{"", ",", "0", "-1", "1x", "k", "1.5M", "99999M"} {
		if _, err := ParseCounts(in); err == nil {
			t.Errorf("ParseCounts(%q) accepted", in)
		}
	}
}

// checkDist checks a distribution's count and ordering.
func checkDist(t *testing.T, what string, d Dist, n int) {
	t.Helper()
	if d.N != n {
		t.Errorf("%s: %d samples, want %d", what, d.N, n)
	}
	if !(d.P50 <= d.P95 && d.P95 <= d.P99 && d.P99 <= d.Max) || d.Mean > d.Max || math.IsNaN(d.P50) {
		t.Errorf("%s: percentiles out of order: %+v", what, d)
	}
}

// checkNothingLeft checks that no process runs the binary and that every step's
// database and Redis keys are gone.
func checkNothingLeft(t *testing.T, bin string, cfg Config, r Report) {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.HasPrefix(cmdline, []byte(bin)) {
			t.Errorf("process %s still runs: %s", e.Name(), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
	var steps []Step
	for _, d := range r.E1 {
		steps = append(steps, d.Step)
	}
	for _, l := range r.Latency {
		steps = append(steps, l.Step)
	}
	for _, e := range r.Enqueue {
		steps = append(steps, e.Step)
	}
	for _, d := range r.E5 {
		steps = append(steps, d.Step)
	}
	for _, d := range r.E6 {
		steps = append(steps, d.Step)
	}
	for _, q := range r.ScaleQueues {
		steps = append(steps, q.Step)
	}
	for _, w := range r.ScaleRows {
		steps = append(steps, w.Step)
	}
	for _, b := range r.FairBacklog {
		steps = append(steps, b.Step)
	}
	for _, s := range r.FairSpread {
		steps = append(steps, s.Step)
	}
	for _, e := range r.FairE1 {
		steps = append(steps, e.Plain.Step, e.Fair.Step)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	for _, s := range steps {
		if s.Database == "" || s.RedisPrefix == "" {
			t.Errorf("step %s run %d names no database or prefix", s.Experiment, s.Run)
			continue
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, s.Database).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("database %s was not dropped", s.Database)
		}
		keys, _, err := rdb.Scan(ctx, 0, s.RedisPrefix+"*", 10000).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			t.Errorf("Redis keys left under %s: %v", s.RedisPrefix, keys)
		}
	}
}

func TestParseLayout(t *testing.T) {
	for in, want := range map[string]Layout{"16x1": {Procs: 16, Concurrency: 1}, " 1x16 ": {Procs: 1, Concurrency: 16},
		"4x100": {Procs: 4, Concurrency: 100}, "16x1+0": {Procs: 16, Concurrency: 1, Prefetch: -1},
		"2x4+3": {Procs: 2, Concurrency: 4, Prefetch: 3}, "16x1/plain": {Procs: 16, Concurrency: 1, Protocol: "plain"},
		"4x50/batched": {Procs: 4, Concurrency: 50, Protocol: "batched"}} {
		got, err := ParseLayout(in)
		if err != nil || got != want {
			t.Errorf("ParseLayout(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, err := ParseLayout(got.String()); err != nil || back != got {
			t.Errorf("ParseLayout(%q.String()) = %v, %v; want %v", got, back, err, got)
		}
	}
	for _, in := range []string{"", "16", "x1", "0x1", "1x0", "-1x2", "1x101", "axb", "1x2x3", "1x1+", "1x1+-1", "1x1+101", "1x1+a", "+1",
		"1x1/", "1x1/sdk", "1x1+0/plain", "/plain"} {
		if _, err := ParseLayout(in); err == nil {
			t.Errorf("ParseLayout(%q) accepted", in)
		}
	}
	got, err := ParseLayouts("1x1, 4x1,,16x1")
	if err != nil || len(got) != 3 || got[2] != (Layout{Procs: 16, Concurrency: 1, Prefetch: 0}) {
		t.Errorf("ParseLayouts = %v, %v", got, err)
	}
	b, err := json.Marshal(Layout{Procs: 4, Concurrency: 16, Prefetch: 0})
	if err != nil || string(b) != `"4x16"` {
		t.Errorf("Layout JSON = %s, %v", b, err)
	}
}

func TestDistOf(t *testing.T) {
	ms := make([]float64, 0, 100)
	for i := 100; i >= 1; i-- {
		ms = append(ms, float64(i))
	}
	d := distOf(ms)
	if d.N != 100 || d.P50 != 50 || d.P95 != 95 || d.P99 != 99 || d.Max != 100 || d.Mean != 50.5 {
		t.Errorf("distOf(1..100) = %+v", d)
	}
	if d := distOf([]float64{7}); d.P50 != 7 || d.P99 != 7 || d.Max != 7 {
		t.Errorf("distOf of one sample = %+v", d)
	}
	if d := distOf(nil); d.N != 0 {
		t.Errorf("distOf(nil) = %+v", d)
	}
	if m := median([]float64{3, 1, 2, 10}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
}

func TestParseProcStat(t *testing.T) {
	line := "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 8 0 987654 1000000 100 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	st, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.comm != "a (weird) name" || st.utime != 1234 || st.stime != 567 || st.start != 987654 {
		t.Errorf("parseProcStat = %+v", st)
	}
	if _, err := parseProcStat([]byte("12 (x) S 1 2")); err == nil {
		t.Error("short line accepted")
	}
	// The harness's own stat parses.
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc")
	}
	if _, err := parseProcStat(raw); err != nil {
		t.Errorf("/proc/self/stat: %v", err)
	}
}

func TestClassifyPostgres(t *testing.T) {
	for title, want := range map[string]string{
		"postgres: 15/main: postgres tf_bench_abc 127.0.0.1(5555) idle":  cpuPGBench,
		"postgres: 15/main: postgres tf_bench_abcd 127.0.0.1(5555) idle": cpuPGOther,
		"postgres: 15/main: autovacuum worker tf_bench_abc":              cpuPGAutovac,
		"postgres: 15/main: walwriter ":                                  cpuPGBackgr,
		"postgres: 15/main: checkpointer ":                               cpuPGBackgr,
		"/usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql/15":  cpuPGBackgr,
		"postgres: 15/main: postgres other 127.0.0.1(5555) SELECT":       cpuPGOther,
	} {
		if got := classifyPostgres(title, "tf_bench_abc"); got != want {
			t.Errorf("classifyPostgres(%q) = %s, want %s", title, got, want)
		}
	}
}

func TestSplit(t *testing.T) {
	a, b, c := procKey{1, 10}, procKey{2, 20}, procKey{3, 30}
	at := time.Now()
	before := cpuSample{at: at, machine: 1000,
		ticks: map[procKey]uint64{a: 100, b: 50},
		class: map[procKey]string{a: cpuServe, b: cpuWorkers}}
	after := cpuSample{at: at.Add(2 * time.Second), machine: 1400,
		ticks: map[procKey]uint64{a: 250, b: 60, c: 40}, // b's pid reused as c would show as a new key
		class: map[procKey]string{a: cpuServe, b: cpuWorkers, c: cpuPGBench}}
	s := split(before, after, 2)
	want := map[string]float64{cpuServe: 1.5, cpuWorkers: 0.1, cpuPGBench: 0.4, cpuElsewhere: 2}
	for k, v := range want {
		if math.Abs(s.Seconds[k]-v) > 1e-9 {
			t.Errorf("%s: %v s, want %v", k, s.Seconds[k], v)
		}
	}
	if s.MachineBusy != 4 || s.WindowSeconds != 2 || s.Cores != 2 {
		t.Errorf("split = %+v", s)
	}
	if _, ok := s.Seconds[cpuRedis]; !ok {
		t.Error("classes without time are missing from the split")
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{}.WithDefaults()
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	bad := good
	bad.Experiments = []string{"e9"}
	bad.E6.Survivors = Layout{Procs: 1, Concurrency: 1, Prefetch: 0}
	bad.Scale.Rows = []int{0}
	bad.ServeEnv = []string{"GOMAXPROCS=1", "REDIS_URL=redis://elsewhere:6379", "=1", "GOGC"}
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "e9") || !strings.Contains(err.Error(), "survivors") ||
		!strings.Contains(err.Error(), "row counts") || !strings.Contains(err.Error(), `"REDIS_URL=redis://elsewhere:6379"`) ||
		!strings.Contains(err.Error(), `"=1"`) || !strings.Contains(err.Error(), `"GOGC"`) || strings.Contains(err.Error(), "GOMAXPROCS") {
		t.Errorf("Validate = %v", err)
	}
	if slices.Contains(good.Experiments, ExpScale) {
		t.Errorf("the default experiments include %s, whose default sizes take many minutes", ExpScale)
	}
}

func TestParallelLeader(t *testing.T) {
	for title, want := range map[string]int{
		"postgres: 15/main: parallel worker for PID 6853 ": 6853,
		"postgres: parallel worker for PID 12":             12,
	} {
		if got, ok := parallelLeader(title); !ok || got != want {
			t.Errorf("parallelLeader(%q) = %d, %v; want %d", title, got, ok, want)
		}
	}
	for _, title := range []string{"postgres: 15/main: postgres tf_bench_abc 127.0.0.1(5555) idle",
		"postgres: 15/main: parallel worker for PID ", "postgres: 15/main: parallel worker for PID x"} {
		if _, ok := parallelLeader(title); ok {
			t.Errorf("parallelLeader(%q) found a leader", title)
		}
	}
}

// TestCreateDatabaseFromTemplate: with Config.DatabaseTemplate, a step's database
// starts as a copy of the template, data and all; without, it starts empty.
func TestCreateDatabaseFromTemplate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := testenv.PostgresURL(t)
	tplURL := testenv.NewDatabase(t)
	tpl, err := pgx.Connect(ctx, tplURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tpl.Exec(ctx, `CREATE TABLE marker AS SELECT 42 AS n`); err != nil {
		t.Fatal(err)
	}
	_ = tpl.Close(ctx)
	template := tpl.Config().Database
	for _, from := range []string{template, ""} {
		name := "tf_bench_tpl_" + randomHex(4)
		if err := createDatabase(ctx, admin, name, from); err != nil {
			t.Fatalf("create %s from %q: %v", name, from, err)
		}
		t.Cleanup(func() { _ = localpg.DropDatabase(context.Background(), admin, name) })
		conn, err := pgx.Connect(ctx, localpg.WithDatabase(admin, name))
		if err != nil {
			t.Fatal(err)
		}
		var has bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass('marker') IS NOT NULL`).Scan(&has); err != nil {
			t.Fatal(err)
		}
		_ = conn.Close(ctx)
		if has != (from != "") {
			t.Errorf("database made from template %q holds the template's table: %v", from, has)
		}
	}
}
