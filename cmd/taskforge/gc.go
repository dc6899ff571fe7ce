package main

import "runtime/debug"

// serveGCPercent is the garbage collector's target for serve when GOGC is not
// set: the heap may grow to five times what is live between collections, rather
// than Go's default twice. Serve's live heap is small (tens of MB) and churns with
// every request, so at Go's default it collects almost continuously; the higher
// target trades a larger peak heap for less CPU per task (docs/operations.md,
// Sizing, has the figures). GOGC (and GOMEMLIMIT) in the environment still win.
const serveGCPercent = 400

// applyServeGC sets serveGCPercent unless getenv finds GOGC set.
func applyServeGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
}
