package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/internal/testenv"
)

// TestRatios checks how a comparison reads its figures: the best peer is the
// fastest (highest rate, lowest time) unless the target names one; a round that
// lacks a figure on either side is left out of it; the median ratio decides a
// ratio target, TaskForge's own median a value target.
func TestRatios(t *testing.T) {
	cc := CompareConfig{Workers: []int{1, 16}}.withDefaults()
	round := func(e1Plain1, e1Plain16, e2Eff, latP50, rtt float64, peers ...PeerResult) Round {
		rep := &Report{
			E1: []DrainResult{
				{Layout: plainLayout(1), Throughput: e1Plain1, PreloadRate: 1000},
				{Layout: plainLayout(16), Throughput: e1Plain16, PreloadRate: 3000},
				{Layout: cc.batchedLayout(16), Throughput: 1, PreloadRate: 2000, Step: Step{Error: "failed"}},
			},
			E2:      []DrainResult{{Layout: plainLayout(16), Efficiency: e2Eff}},
			Latency: []LatencyResult{{Receipt: Dist{P50: latP50, P95: 2 * latP50}}},
			Enqueue: []EnqueueResult{{RTT: Dist{P50: rtt}}},
		}
		return Round{TaskForge: rep, Peers: &PeerReport{Results: peers}}
	}
	rounds := []Round{
		round(300, 1000, 0.80, 2.0, 1.5,
			PeerResult{System: "river", Workload: "e1", Workers: 1, PerSec: 600},
			PeerResult{System: "asynq", Workload: "e1", Workers: 1, PerSec: 3000},
			PeerResult{System: "river", Workload: "e1", Workers: 16, PerSec: 5000},
			PeerResult{System: "asynq", Workload: "e1", Workers: 16, PerSec: 10000},
			PeerResult{System: "river", Workload: "e1-preload", PerSec: 2500},
			PeerResult{System: "asynq", Workload: "e1-preload", PerSec: 2000},
			PeerResult{System: "river", Workload: "e2", PerSec: 300},
			PeerResult{System: "river", Workload: "latency", P50Ms: 1.0, P95Ms: 4},
			PeerResult{System: "asynq", Workload: "latency", P50Ms: 1.6, P95Ms: 2},
			PeerResult{System: "river", Workload: "enqueue", P50Ms: 1.0},
			PeerResult{System: "asynq", Workload: "enqueue", P50Ms: 0.3}),
		round(200, 2000, 0.96, 1.3, 1.2,
			PeerResult{System: "river", Workload: "e1", Workers: 1, PerSec: 400},
			PeerResult{System: "river", Workload: "e1", Workers: 16, PerSec: 2000},
			PeerResult{System: "river", Workload: "e1-preload", PerSec: 4000},
			PeerResult{System: "river", Workload: "latency", P50Ms: 1.0, P95Ms: 1.0},
			PeerResult{System: "river", Workload: "enqueue", P50Ms: 1.0}),
		{TaskForge: nil, Peers: &PeerReport{}}, // a round that failed before TaskForge ran
	}
	got := map[string]Ratio{}
	for _, r := range ratios(cc.figures(), rounds) {
		got[r.Figure] = r
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	type want struct {
		ratios []float64
		peers  string
		met    string // "met", "missed" or "" (no target)
	}
	for figure, w := range map[string]want{
		// Against River alone, although Asynq was faster.
		// The bare protocol has no target (DESIGN §14).
		"e1 plain, 1 worker": {[]float64{0.5, 0.5}, "river,river", ""},
		// Against the faster peer of each round; median of 0.1 and 1.0.
		"e1 plain, 16 workers": {[]float64{0.1, 1.0}, "asynq,river", ""},
		// Failed on TaskForge's side in both rounds: not measured, no verdict.
		"e1 batched (50 per poll), 16 workers": {nil, "", ""},
		// TaskForge's is the median of the round's steps' preloads, the failed
		// step's left out: 2,000.
		"e1 preload, 1 client": {[]float64{2000.0 / 2500, 2000.0 / 4000}, "river,river", "missed"},
		// The round without a peer's e2 is left out; the value target reads
		// TaskForge's efficiency in the other (80 %).
		"e2 plain, 16 workers": {[]float64{80.0 / (100 * 300.0 / 320)}, "river", "missed"},
		// The lowest time is the best: River's 1.0 ms.
		"enqueue → worker p50, 100/s": {[]float64{2.0, 1.3}, "river,river", "missed"},
		// Asynq's 2 ms in round 1, River's 1 ms in round 2: 2.0 and 2.6, median 2.3.
		"enqueue → worker p95, 100/s": {[]float64{2.0, 2.6}, "asynq,river", "missed"},
		// Against River, although Asynq's 0.3 ms was lower.
		"one enqueue's round trip p50": {[]float64{1.5, 1.2}, "river,river", "missed"},
	} {
		r, ok := got[figure]
		if !ok {
			t.Errorf("%s: no such figure among %v", figure, keys(got))
			continue
		}
		if len(r.Ratios) != len(w.ratios) || strings.Join(r.PeerNames, ",") != w.peers {
			t.Errorf("%s: ratios %v against %v, want %v against %s", figure, r.Ratios, r.PeerNames, w.ratios, w.peers)
			continue
		}
		for i := range w.ratios {
			if !near(r.Ratios[i], w.ratios[i]) {
				t.Errorf("%s: ratio %d is %v, want %v", figure, i, r.Ratios[i], w.ratios[i])
			}
		}
		verdict := ""
		if r.Met != nil {
			verdict = map[bool]string{true: "met", false: "missed"}[*r.Met]
		}
		if verdict != w.met {
			t.Errorf("%s: target %q %q, want %q (median %v)", figure, r.Target, verdict, w.met, r.Median)
		}
	}
	if r := got["e2 plain, 16 workers"]; r.Target != "≥ 95 % of ideal" || len(r.TaskForge) != 1 {
		t.Errorf("e2's target is %q over %v", r.Target, r.TaskForge)
	}
	// 1.3 ≤ 1.3: met on the line.
	rounds[0].TaskForge.Latency[0].Receipt.P50 = 1.3
	for _, r := range ratios(cc.figures(), rounds[:2]) {
		if r.Figure == "enqueue → worker p50, 100/s" && (r.Met == nil || !*r.Met) {
			t.Errorf("a median ratio of %v does not meet ≤ 1.3×", r.Median)
		}
	}
}

func keys(m map[string]Ratio) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// buildPeers builds the peers program (internal/bench/peers, its own module).
func buildPeers(t *testing.T) string {
	t.Helper()
	peers := filepath.Join(t.TempDir(), "peers")
	build := exec.Command("go", "build", "-o", peers, ".")
	build.Dir = "peers"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the peers program: %v\n%s", err, out)
	}
	return peers
}

// countRiverDatabases counts the databases the peers program made for River.
func countRiverDatabases(ctx context.Context, t *testing.T, serverURL string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname LIKE 'peers_river_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCompareInterrupted: a comparison interrupted while the peers run ends with
// the context's error, and the peers program, told to stop rather than killed,
// drops River's database first.
func TestCompareInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds River and Asynq and starts serve and workers; skipped with -short")
	}
	bin, peers := buildTaskforge(t), buildPeers(t)
	dbURL := testenv.PostgresURL(t)
	cc := CompareConfig{
		Bench: Config{Binary: bin, DatabaseURL: dbURL, RedisURL: "redis://" + testenv.RedisAddr(t),
			E1: DrainConfig{Warmup: -1}, E2: DrainConfig{Warmup: -1}, Latency: LatencyConfig{Warmup: -1},
			Enqueue: EnqueueConfig{Warmup: -1}, WorkDir: t.TempDir()},
		// River's part (its migrations, then every workload) lasts seconds after
		// its database appears, which the test sees within 20 ms.
		Peers: peers, Rounds: 1, Workers: []int{1}, Batch: 4,
		// A latency stream of 100 tasks lasts a second: the harness flags a stream
		// that fell 10 % behind its rate, and a second absorbs a 100 ms stall of a
		// busy machine where a tenth of one (10 tasks) does not.
		Tasks: 200, SleepTasks: 16, LatencyTasks: 100, EnqueueTasks: 10,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runCtx, interrupt := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := Compare(runCtx, cc)
		done <- err
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for countRiverDatabases(ctx, t, dbURL) == 0 {
		select {
		case err := <-done:
			t.Fatalf("Compare ended before the peers made River's database: %v", err)
		case <-ctx.Done():
			t.Fatal("the peers never made River's database")
		case <-tick.C:
		}
	}
	interrupt()
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "round 1, go peers") {
		t.Fatalf("Compare after the interrupt: %v, want the peers' round to fail", err)
	}
	if n := countRiverDatabases(ctx, t, dbURL); n != 0 {
		t.Errorf("%d River database(s) left after the interrupt", n)
	}
}

// TestCompare builds the peers program (internal/bench/peers, River and Asynq)
// and compares it with TaskForge at tiny sizes over two rounds against real
// PostgreSQL and Redis: the rounds alternate which side runs first, every figure
// has a ratio from each round, and neither side leaves a database or key behind.
func TestCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("builds River and Asynq and starts serve and workers; skipped with -short")
	}
	bin, peers := buildTaskforge(t), buildPeers(t)
	cc := CompareConfig{
		Bench: Config{Binary: bin, DatabaseURL: testenv.PostgresURL(t), RedisURL: "redis://" + testenv.RedisAddr(t),
			E1: DrainConfig{Warmup: 10}, E2: DrainConfig{Warmup: -1}, Latency: LatencyConfig{Warmup: -1},
			Enqueue: EnqueueConfig{Warmup: 5}, WorkDir: t.TempDir(), ServeEnv: []string{"GOGC=200"}},
		Peers: peers, Rounds: 2, Workers: []int{1}, Batch: 4,
		// 100 latency tasks: see TestCompareInterrupted.
		Tasks: 100, SleepTasks: 32, LatencyTasks: 100, EnqueueTasks: 40,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := Compare(ctx, cc)
	if err != nil {
		t.Fatalf("Compare: %v", err)
	}
	if len(res.Rounds) != 2 || !res.Rounds[0].TaskForgeFirst || res.Rounds[1].TaskForgeFirst {
		t.Fatalf("want two rounds, TaskForge first in the first only: %+v", res.Rounds)
	}
	for i, rd := range res.Rounds {
		systems := map[string]int{}
		for _, p := range rd.Peers.Results {
			systems[p.System]++
		}
		// e1 at one worker count, preload, e2, latency, enqueue: five each.
		if systems["river"] != 5 || systems["asynq"] != 5 {
			t.Errorf("round %d: peers' figures by system %v, want five each", i+1, systems)
		}
		if n := len(rd.TaskForge.Enqueue); n != 1 || rd.TaskForge.Enqueue[0].RTT.N != 40 {
			t.Errorf("round %d: TaskForge's enqueue step %+v", i+1, rd.TaskForge.Enqueue)
		}
	}
	wantFigures := []string{"e1 plain, 1 worker", "e1 batched (4 per poll), 1 worker", "e1 preload, 1 client",
		"e2 plain, 16 workers", "enqueue → worker p50, 100/s", "enqueue → worker p95, 100/s", "one enqueue's round trip p50",
		"go SDK e1, 1 handler", "go SDK e2, 16 handlers"}
	if len(res.Ratios) != len(wantFigures) {
		t.Errorf("figures %d, want %d", len(res.Ratios), len(wantFigures))
	}
	for i, r := range res.Ratios {
		if i < len(wantFigures) && r.Figure != wantFigures[i] {
			t.Errorf("figure %d is %q, want %q", i, r.Figure, wantFigures[i])
		}
		if len(r.Ratios) != 2 || r.Median <= 0 || math.IsNaN(r.Median) || math.IsInf(r.Median, 0) {
			t.Errorf("%s: ratios %v (median %v), want one per round", r.Figure, r.Ratios, r.Median)
		}
		if r.Against == "river" && strings.Join(r.PeerNames, ",") != "river,river" {
			t.Errorf("%s: compared with %v, want River", r.Figure, r.PeerNames)
		}
		if r.Target != "" && r.Met == nil {
			t.Errorf("%s: target %q without a verdict", r.Figure, r.Target)
		}
	}

	var table bytes.Buffer
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range append(wantFigures, "2 rounds", "≤ 1.0× river: ", "TaskForge's serve ran with GOGC=200") {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back Comparison
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || len(back.Ratios) != len(res.Ratios) ||
		!slices.Equal(back.ServeEnv, []string{"GOGC=200"}) {
		t.Fatalf("comparison JSON does not read back (%v):\n%s", err, buf.String())
	}

	// Nothing left: TaskForge's steps (checkNothingLeft), River's database and
	// Asynq's keys.
	for _, rd := range res.Rounds {
		checkNothingLeft(t, bin, cc.Bench.WithDefaults(), *rd.TaskForge)
	}
	if left := countRiverDatabases(ctx, t, cc.Bench.DatabaseURL); left != 0 {
		t.Errorf("River's databases left: %d", left)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	if keys, err := rdb.Keys(ctx, "asynq:*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("Asynq's keys left: %d (%v)", len(keys), err)
	}
}

// TestLanguageRatios: a language's SDK figures read that language's pair of
// reports in a round, against the best of that language's peers only.
func TestLanguageRatios(t *testing.T) {
	cc := CompareConfig{Workers: []int{16}, Languages: []string{LanguageGo, LanguageTypeScript}}.withDefaults()
	ts := &Report{
		E1:      []DrainResult{{Layout: sdkLayout(16), Throughput: 900, PreloadRate: 4000}},
		E2:      []DrainResult{{Layout: sdkLayout(16), Efficiency: 0.97}},
		Latency: []LatencyResult{{Receipt: Dist{P50: 2, P95: 3}}},
	}
	rd := Round{
		TaskForge: &Report{E1: []DrainResult{{Layout: sdkLayout(16), Throughput: 5000}}},
		Peers:     &PeerReport{Results: []PeerResult{{System: "river", Workload: "e1", Workers: 16, PerSec: 2500}}},
		Languages: []LanguageRound{{Language: LanguageTypeScript, TaskForge: ts, Peers: &PeerReport{Results: []PeerResult{
			{System: "graphile-worker", Workload: "e1", Workers: 16, PerSec: 600},
			{System: "bullmq", Workload: "e1", Workers: 16, PerSec: 1800},
			{System: "bullmq", Workload: "e1-preload", PerSec: 8000},
			{System: "bullmq", Workload: "e2", PerSec: 300},
			{System: "graphile-worker", Workload: "latency", P50Ms: 4, P95Ms: 10},
			{System: "bullmq", Workload: "latency", P50Ms: 1, P95Ms: 2},
		}}}},
	}
	got := map[string]Ratio{}
	for _, r := range ratios(cc.figures(), []Round{rd}) {
		got[r.Figure] = r
	}
	for figure, want := range map[string]struct {
		ratio float64
		peer  string
	}{
		"go SDK e1, 16 handlers":                     {2, "river"},
		"typescript SDK e1, 16 handlers":             {0.5, "bullmq"},
		"typescript e1 preload, 1 client":            {0.5, "bullmq"},
		"typescript SDK enqueue → worker p50, 100/s": {2, "bullmq"},
		"typescript SDK enqueue → worker p95, 100/s": {1.5, "bullmq"},
	} {
		r := got[figure]
		if len(r.Ratios) != 1 || math.Abs(r.Ratios[0]-want.ratio) > 1e-9 || r.PeerNames[0] != want.peer {
			t.Errorf("%s: ratios %v against %v, want %v against %s", figure, r.Ratios, r.PeerNames, want.ratio, want.peer)
		}
	}
	if r := got["typescript SDK e2, 16 handlers"]; r.Met == nil || !*r.Met || r.Language != LanguageTypeScript {
		t.Errorf("typescript e2 at 97 %% of ideal: %+v, want the ≥ 95 %% target met", r)
	}
}
