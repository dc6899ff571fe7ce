package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testenv"
)

// TestFair runs the fair experiment at small sizes and checks that its parts are
// well-formed and plausible: the small groups' tasks went out while the backlog
// still waited, the big group got a handful of turns meanwhile, both spread steps
// drained, and the E1 pair ran in one run.
func TestFair(t *testing.T) {
	if testing.Short() {
		t.Skip("starts serve and worker processes; skipped with -short")
	}
	bin := buildTaskforge(t)
	cfg := Config{
		Binary:      bin,
		DatabaseURL: testenv.PostgresURL(t),
		RedisURL:    "redis://" + testenv.RedisAddr(t),
		Runs:        1,
		Experiments: []string{ExpFair},
		Scale:       ScaleConfig{Settle: 200 * time.Millisecond},
		Fair: FairConfig{Backlog: 20000, SmallGroups: 5, SmallTasks: 4, Spread: 500,
			Layout: Layout{Procs: 1, Concurrency: 4}, IdleWindow: time.Second,
			E1Tasks: 200, E1Layout: Layout{Procs: 1, Concurrency: 4}},
		WorkDir: t.TempDir(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
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
	if len(back.FairBacklog) != 1 || len(back.FairSpread) != 2 || len(back.FairE1) != 1 {
		t.Fatalf("want 1 backlog, 2 spread and 1 e1 result, got %d, %d, %d", len(back.FairBacklog), len(back.FairSpread), len(back.FairE1))
	}
	b := back.FairBacklog[0]
	checkDist(t, "small groups' receipt", b.Receipt, 20)
	// Each small group's 4 tasks go out while the big group gets its turns, what
	// its workers' polls held already, and what it got while the small tasks
	// waited for the dispatcher (the buffer full of its backlog): a few dozen
	// here, nowhere near its 20,000.
	checkDist(t, "big group's turns", b.BigTurns, 5)
	if b.Error != "" || b.Handouts < 20 || b.BigTurns.Max > 2000 || b.Throughput <= 0 || b.RoundMs <= 0 {
		t.Errorf("implausible backlog step: %+v", b)
	}
	for i, want := range []int{500, 1} {
		s := back.FairSpread[i]
		if s.Error != "" || s.Groups != want || s.Tasks != 500 || s.Throughput <= 0 || s.IdleCPU.WindowSeconds < 1 ||
			s.IdleServeCores < 0 || s.IdleServeCores > 2 {
			t.Errorf("implausible spread step (%d groups): %+v", want, s)
		}
		checkDist(t, "probes", s.Probe, fairProbes)
	}
	e := back.FairE1[0]
	if e.Error != "" || e.Plain.Done != 200 || e.Fair.Done != 200 || e.Ratio <= 0 || e.First != "plain" {
		t.Errorf("implausible e1 pair: ratio %.2f, plain %d done, fair %d done, first %s, error %q",
			e.Ratio, e.Plain.Done, e.Fair.Done, e.First, e.Error)
	}

	var table bytes.Buffer
	if err := report.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Fair queue, a backlog", "Fair queue, due tasks", "Fair queue with one group"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	checkNothingLeft(t, bin, cfg, back)
}
