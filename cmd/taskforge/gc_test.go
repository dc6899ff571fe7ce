package main

import (
	"runtime/debug"
	"testing"
)

// TestApplyServeGC: serve raises the GC target when GOGC is unset, and leaves a
// GOGC from the environment alone.
func TestApplyServeGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	applyServeGC(func(string) string { return "150" })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("with GOGC set, the GC target became %d", got)
	}
	applyServeGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != serveGCPercent {
		t.Fatalf("with GOGC unset, the GC target is %d, not %d", got, serveGCPercent)
	}
}
