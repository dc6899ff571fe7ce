package crashpoint

import (
	"sync"
	"testing"
)

func TestHitHonoursConfiguredOdds(t *testing.T) {
	t.Setenv("TASKFORGE_CRASHPOINTS", "always=1, never=0,bogus, half=0.5")
	once = sync.Once{}
	var crashed []string
	crash = func(p string) { crashed = append(crashed, p) }
	for i := 0; i < 1000; i++ {
		Hit("always")
		Hit("never")
		Hit("half")
		Hit("unlisted")
	}
	counts := map[string]int{}
	for _, p := range crashed {
		counts[p]++
	}
	if counts["always"] != 1000 || counts["never"] != 0 || counts["unlisted"] != 0 || counts["half"] < 400 || counts["half"] > 600 {
		t.Fatalf("crashes per point: %v", counts)
	}
}
